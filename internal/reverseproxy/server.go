package reverseproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// NewServer returns a server for h with kube-apiserver's limits: at most 1 MiB of request
// headers, read within 32 s; idle connections closed after 90 s; over HTTP/2, at most 100
// concurrent streams per connection, frames and per-stream receive buffers of 256 KiB, and
// 25 MiB of receive buffer per connection. It has no write timeout, which would cut
// watches and exec sessions. tlsConfig and errorLog may be nil.
func NewServer(h http.Handler, tlsConfig *tls.Config, errorLog *log.Logger) *http.Server {
	const (
		frame   = 256 << 10 // most API objects fit one frame
		streams = 100       // what clients open at most; more is abuse
	)
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		ErrorLog:          errorLog,
		MaxHeaderBytes:    1 << 20,
		ReadHeaderTimeout: 32 * time.Second,
		IdleTimeout:       90 * time.Second,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          streams,
			MaxReadFrameSize:              frame,
			MaxReceiveBufferPerStream:     frame,
			MaxReceiveBufferPerConnection: frame * streams,
		},
	}
}

// ServeTLS serves srv over TLS (srv.TLSConfig) on ln and runs background, whose context
// ends when ctx does or serving fails. Then it stops accepting connections, lets requests
// in progress finish for up to grace (closing what is still open after it, such as
// watches), waits for background to return, and returns the error that stopped serving,
// or nil once ctx ended. background may be nil.
func ServeTLS(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration, background func(context.Context)) error {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() {
		if err := srv.Serve(tls.NewListener(ln, srv.TLSConfig)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
			stop()
		}
	})
	if background != nil {
		wg.Go(func() { background(runCtx) })
	}
	<-runCtx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close() // watches still open after the grace period
	}
	wg.Wait()
	return serveErr
}
