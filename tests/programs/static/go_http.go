// A static Go HTTP server (net/http, loopback only) for the static-program
// tests: `go_http PORT` serves a fixed page at / and /size/N (N bytes of a
// fixed pattern), prints "listening on PORT" once it accepts, and on SIGTERM
// shuts down gracefully, prints how many requests it served, and exits 0.
// PORT 0 lets the kernel choose; the line says which.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

const page = "<html><body>ferry static go server</body></html>\n"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go_http PORT")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	var served atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Length", strconv.Itoa(len(page)))
		w.Write([]byte(page))
	})
	mux.HandleFunc("/size/", func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/size/"))
		if err != nil || n < 0 || n > 1<<24 {
			http.Error(w, "bad size", http.StatusBadRequest)
			return
		}
		body := make([]byte, n)
		for i := range body {
			body[i] = byte('a' + i%26)
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(body)
	})
	srv := &http.Server{Handler: mux}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		<-stop
		srv.Shutdown(context.Background())
		close(done)
	}()
	fmt.Printf("listening on %d\n", ln.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
	<-done
	fmt.Printf("served %d requests\n", served.Load())
}
