// Command kplug-exec-cache is `kplug exec-cache` as a program of its own. It links the
// cache and nothing else (no client-go, no API machinery): Go initialises every package a
// binary links, and kplug links over 300, so a warm hit through kplug costs about three
// times as much as through this program (docs/benchmarks.md). See docs/exec-credentials.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kplug/kplug/internal/execcache"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execcache.Main(ctx, "kplug-exec-cache", os.Args[1:], execcache.Process{
		Environ:     os.Environ(),
		Stdin:       os.Stdin,
		Stdout:      os.Stdout,
		Stderr:      os.Stderr,
		Client:      execcache.ClientOf(os.Getppid()),
		Caller:      execcache.CallerOf(os.Getppid()),
		AccountHome: execcache.AccountHome(),
	})
	stop()
	os.Exit(code)
}
