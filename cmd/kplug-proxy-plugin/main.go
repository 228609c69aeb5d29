// Command kplug-proxy-plugin is `kplug proxy-plugin` as a program of its own. It links
// the exec proxy and what signs and authenticates requests, and none of kplug's other
// mechanisms: `kplug proxy-plugin` starts it as the daemon that keeps serving when it is
// installed beside kplug, because a daemon's resident memory includes the pages of every
// package its program links and initialises (docs/reliability.md). See
// docs/exec-proxy.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kplug/kplug/internal/proxyplugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := proxyplugin.Main(ctx, "kplug-proxy-plugin", os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
