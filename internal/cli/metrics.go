package cli

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplug/kplug/internal/metrics"
)

// serveWithMetrics runs serve, serving reg at addr meanwhile (--metrics-addr of the
// long-running commands; empty serves no metrics).
func serveWithMetrics(ctx context.Context, g *globals, addr string, reg *prometheus.Registry, serve func(context.Context) error) error {
	if addr != "" {
		srv, err := metrics.Serve(addr, reg)
		if err != nil {
			return err
		}
		defer srv.Close()
		g.log.Info("serving metrics", "address", addr)
	}
	return serve(ctx)
}
