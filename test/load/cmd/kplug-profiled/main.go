// Command kplug-profiled is kplug, the same cli.Run as cmd/kplug, that also serves
// net/http/pprof on a loopback port when $KPLUG_LOAD_PPROF_DIR names a directory, and
// writes that port's address to the file <dir>/<pid>. The load harness (test/load) runs
// the proxies it measures as this program, to read their goroutines and take their
// profiles; the exec proxy's daemon, which the plugin starts from its own executable,
// inherits the variable. Nothing else differs from kplug.
package main

import (
	"context"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/kplug/kplug/internal/cli"
)

func main() {
	if dir := os.Getenv("KPLUG_LOAD_PPROF_DIR"); dir != "" {
		servePprof(dir)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}

// servePprof serves the profiles on 127.0.0.1 and says where in dir; a failure only
// leaves the harness without profiles of this process.
func servePprof(dir string) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	_ = os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), []byte(ln.Addr().String()), 0o600)
}
