// Command kplug-profiled is kplug, the same cli.Run as cmd/kplug, that also serves
// net/http/pprof for the load harness (internal/profiled). The harness runs the proxies it
// measures as this program, to read their goroutines and take their profiles. Nothing
// else differs from kplug.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kplug/kplug/internal/cli"
	"github.com/kplug/kplug/test/load/internal/profiled"
)

func main() {
	profiled.Serve()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
