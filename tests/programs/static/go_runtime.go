// A static Go program exercising what a Go runtime does to the shim: many
// goroutines on several threads, timers, os/exec of a child and of children
// from several goroutines at once, os/signal, and a panic.  `go_runtime`
// runs every part but the panic, in a fixed order, with output that does
// not depend on timing or pids; `go_runtime panic` panics (exit 2,
// "panic: ..." and the goroutine trace on stderr); `go_runtime child` is
// what the exec part starts.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"
)

func goroutines() {
	const n = 64
	results := make(chan int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sum := 0
			for k := 0; k <= i*1000; k++ {
				sum += k % 7
			}
			// a blocking call on every goroutine: the runtime hands its P on
			syscall.Getppid()
			time.Sleep(time.Millisecond)
			results <- sum
		}(i)
	}
	wg.Wait()
	close(results)
	var all []int
	for r := range results {
		all = append(all, r)
	}
	sort.Ints(all)
	total := 0
	for _, r := range all {
		total += r
	}
	fmt.Printf("goroutines: %d results, total %d, min %d, max %d\n", len(all), total, all[0], all[len(all)-1])
}

func timers() {
	ticker := time.NewTicker(5 * time.Millisecond)
	ticks := 0
	for range ticker.C {
		ticks++
		if ticks == 5 {
			break
		}
	}
	ticker.Stop()
	fired := make(chan string, 1)
	time.AfterFunc(10*time.Millisecond, func() { fired <- "after-func" })
	timer := time.NewTimer(time.Hour)
	stopped := timer.Stop()
	select {
	case what := <-fired:
		fmt.Printf("timers: %d ticks, %s fired, long timer stopped %v\n", ticks, what, stopped)
	case <-time.After(10 * time.Second):
		fmt.Println("timers: after-func never fired")
	}
}

func children() {
	self, err := os.Executable()
	if err != nil {
		fmt.Println("exec: no executable:", err)
		return
	}
	out, err := exec.Command(self, "child", "a b", "c").Output()
	fmt.Printf("exec: self said %q, err %v\n", out, err)
	out, err = exec.Command("/bin/sh", "-c", "echo from sh; exit 3").Output()
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	fmt.Printf("exec: sh said %q, exit %d\n", out, code)
}

// Children from several goroutines at once.  Go's os/exec vforks from a
// goroutine's small stack; the later children take slots their parent
// claimed ahead, and the parent writes their records once its vfork
// returns: frames the shim ran there on the goroutine's stack overran it.
func spawns() {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := 0
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 8; i++ {
				if exec.Command("/bin/true").Run() == nil {
					mu.Lock()
					ran++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("spawns: %d of 32 ran\n", ran)
}

func signals() {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGHUP)
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	first := <-ch
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	second := <-ch
	signal.Stop(ch)
	fmt.Printf("signals: got %v, then %v\n", first, second)
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "child":
			fmt.Printf("child %q", os.Args[2:])
			return
		case "panic":
			fmt.Println("about to panic")
			var m map[string]int
			m["boom"] = 1 // assignment to entry in nil map
			return
		default:
			fmt.Fprintln(os.Stderr, "usage: go_runtime [child ARGS...|panic]")
			os.Exit(2)
		}
	}
	goroutines()
	timers()
	children()
	spawns()
	signals()
	fmt.Println("done")
}
