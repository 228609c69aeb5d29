// Command kplug is pluggable credentials and proxies for Kubernetes. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kplug/kplug/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
