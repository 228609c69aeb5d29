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

// kube-apiserver's request header limits (k8s.io/apiserver's secure serving).
const (
	// MaxHeaderBytes bounds a request's header: HTTP/1.1's request line and field lines
	// (Go reads 4 KiB more), HTTP/2's header list.
	MaxHeaderBytes = 1 << 20
	// MaxHeaderValues bounds how many header values a request carries: each field line
	// counts one (over HTTP/2, each field), whatever its name. Go 1.27 counts them
	// (http.Server.MaxHeaderValueCount) and answers 431 past 500 by default, which a user
	// in a few hundred groups reaches: each group is a line of its own in Impersonate-Group
	// and X-Remote-Group, which must not be joined. k8s.io/apiserver raises the count to
	// 16384 (kubernetes/kubernetes#142607); kplug's proxies take what the server behind
	// them takes. Go 1.26 and earlier count nothing: only the bytes bound a header there.
	MaxHeaderValues = 16384
)

// http2Window is the HTTP/2 frame size and per-stream receive window of the proxies'
// listeners and of their upstream transports: most API objects fit one frame.
const http2Window = 256 << 10

// LimitHeaders sets srv's request header limits: maxBytes of header, and MaxHeaderValues
// values where the Go that builds kplug counts them (1.27 on), so that what a proxy admits
// does not depend on that Go's defaults.
func LimitHeaders(srv *http.Server, maxBytes int) {
	srv.MaxHeaderBytes = maxBytes
	setMaxHeaderValues(srv, MaxHeaderValues)
}

// NewServer returns a server for h with kube-apiserver's limits: at most MaxHeaderBytes of
// request header in at most MaxHeaderValues values (LimitHeaders), read within 32 s; idle
// connections closed after 90 s; over HTTP/2, at most 100 concurrent streams per
// connection, frames and per-stream receive buffers of 256 KiB, and 25 MiB of receive
// buffer per connection. It has no write timeout, which would cut watches and exec
// sessions. tlsConfig and errorLog may be nil.
func NewServer(h http.Handler, tlsConfig *tls.Config, errorLog *log.Logger) *http.Server {
	const streams = 100 // what clients open at most; more is abuse
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		ErrorLog:          errorLog,
		ReadHeaderTimeout: 32 * time.Second,
		IdleTimeout:       90 * time.Second,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          streams,
			MaxReadFrameSize:              http2Window,
			MaxReceiveBufferPerStream:     http2Window,
			MaxReceiveBufferPerConnection: http2Window * streams,
		},
	}
	LimitHeaders(srv, MaxHeaderBytes)
	return srv
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
