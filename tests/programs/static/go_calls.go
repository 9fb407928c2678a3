// Goroutines that call the kernel themselves (Go's runtime and syscall
// package make their calls directly, not through libc) while the garbage
// collector runs: 16 goroutines each open, read and close a file and ask
// their pid 3000 times, collecting every 300.  Built with cgo
// (go_calls-cgo) and started by a shell before any run made its image, its
// calls are caught by the catch-all on goroutine stacks of a few KiB.
// Prints "ok" and the number of reads, the same natively and under Ferry.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
)

func main() {
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
