// A static Go program (tests/test_static_programs.py builds it with
// CGO_ENABLED=0): goroutines making calls while others spin (SIGURG
// preemption lands inside trampolines), timers, os/exec of a child (itself),
// os/signal, and a panic on request; `loop N` is bench/overhead.py's
// syscall.Getppid() loop; `exe` says os.Executable().
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func spin(stop *int32) int {
	x := 0
	for atomic.LoadInt32(stop) == 0 {
		x++
	}
	return x
}

// The ns per call of the best of 5 rounds of n calls, as bench/overhead.c.
func loop(n int) {
	best := 1e30
	for r := 0; r < 5; r++ {
		t0 := time.Now()
		for i := 0; i < n; i++ {
			syscall.Getppid()
		}
		if per := float64(time.Since(t0).Nanoseconds()) / float64(n); per < best {
			best = per
		}
	}
	fmt.Printf("%.2f\n", best)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		fmt.Println("from child")
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "exe" {
		// what the toolchain finds its GOROOT by
		self, err := os.Executable()
		fmt.Println("executable", self, err)
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "loop" {
		n, _ := strconv.Atoi(os.Args[2])
		loop(n)
		return
	}
	runtime.GOMAXPROCS(4)
	// goroutines making calls while others spin (SIGURG preemption)
	var stop int32
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		go spin(&stop)
	}
	var calls int64
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for k := 0; k < 2000; k++ {
				syscall.Getppid()
				atomic.AddInt64(&calls, 1)
				if k%500 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}(i)
	}
	wg.Wait()
	atomic.StoreInt32(&stop, 1)
	fmt.Println("calls", calls)
	// timers
	t := time.NewTimer(20 * time.Millisecond)
	<-t.C
	fmt.Println("timer fired")
	// os/exec of a child
	self, _ := os.Executable()
	out, err := exec.Command(self, "child").Output()
	fmt.Printf("child %q %v\n", out, err)
	// os/signal
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	fmt.Println("signal", <-ch)
	if len(os.Args) > 1 && os.Args[1] == "panic" {
		var m map[string]int
		m["x"] = 1
	}
}
