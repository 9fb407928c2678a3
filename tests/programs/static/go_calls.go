// Goroutines that call the kernel themselves (Go's runtime and syscall
// package make their calls directly, not through libc) while the garbage
// collector runs: 16 goroutines each open, read and close a file and ask
// their pid 3000 times, collecting every 300.  Built with cgo
// (go_calls-cgo) and started by a shell before any run made its image, its
// calls are caught by the catch-all on goroutine stacks of a few KiB.
// Prints "ok" and the number of reads, the same natively and under Ferry.
// `go_calls spawns`: 4 goroutines each run /bin/true 40 times (os/exec:
// Go blocks every signal around each fork, a clone with CLONE_VM|CLONE_VFORK
// that the catch-all makes from its handler), and it prints how many ran.
// `go_calls threads`: 40 goroutines each lock their thread and end, so Go
// ends the thread too, taking down the alternate signal stack it gave it
// (sigaltstack with SS_DISABLE, which Go checks and crashes on failing);
// it prints how many ended.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
)

func spawns() {
	var wg sync.WaitGroup
	var ran int64
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				if exec.Command("/bin/true").Run() == nil {
					atomic.AddInt64(&ran, 1)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Println("spawns ran", ran)
}

func threads() {
	var ended int64
	for i := 0; i < 40; i++ {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			syscall.Getpid()
			atomic.AddInt64(&ended, 1)
			// returning without UnlockOSThread ends the thread
		}()
		<-done
	}
	fmt.Println("threads ended", ended)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "spawns" {
		spawns()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "threads" {
		threads()
		return
	}
	var wg sync.WaitGroup
	var reads int64
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			for j := 0; j < 3000; j++ {
				syscall.Getpid()
				if f, err := os.Open("/proc/self/stat"); err == nil {
					if n, _ := f.Read(buf); n > 0 {
						atomic.AddInt64(&reads, 1)
					}
					f.Close()
				}
				if j%300 == 0 {
					runtime.GC()
				}
			}
		}()
	}
	wg.Wait()
	fmt.Println("ok", reads)
}
