package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveMetrics serves reg at /metrics on addr (--metrics-addr of the long-running
// commands) until the returned server is closed. The endpoint is as bounded as the
// servers beside it: slow or idle clients are dropped, headers are capped.
func serveMetrics(addr string, reg *prometheus.Registry) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// serveWithMetrics runs serve, serving reg at addr meanwhile (--metrics-addr of the
// long-running commands; empty serves no metrics).
func serveWithMetrics(ctx context.Context, g *globals, addr string, reg *prometheus.Registry, serve func(context.Context) error) error {
	if addr != "" {
		srv, err := serveMetrics(addr, reg)
		if err != nil {
			return err
		}
		defer srv.Close()
		g.log.Info("serving metrics", "address", addr)
	}
	return serve(ctx)
}
