// Command kplug-proxy-plugin-profiled is kplug-proxy-plugin, the same proxyplugin.Main as
// cmd/kplug-proxy-plugin, that also serves net/http/pprof for the load harness
// (internal/profiled). The harness installs it as kplug-proxy-plugin beside
// kplug-profiled, so the exec proxy's daemon is measured as users run it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kplug/kplug/internal/proxyplugin"
	"github.com/kplug/kplug/test/load/internal/profiled"
)

func main() {
	profiled.Serve()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := proxyplugin.Main(ctx, "kplug-proxy-plugin", os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
