// Package profiled serves net/http/pprof, for the programs the load harness measures, on
// a loopback port when $KPLUG_LOAD_PPROF_DIR names a directory, and writes that port's
// address to the file <dir>/<pid>. A daemon a plugin starts inherits the variable.
package profiled

import (
	"context"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Serve serves the profiles when $KPLUG_LOAD_PPROF_DIR is set; a failure only leaves the
// harness without profiles of this process.
func Serve() {
	if dir := os.Getenv("KPLUG_LOAD_PPROF_DIR"); dir != "" {
		servePprof(dir)
	}
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
