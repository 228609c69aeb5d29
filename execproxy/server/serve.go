package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/reverseproxy"
)

// Options configure Serve. A Func returns them to Run, which fills in the fields the
// client's request decides (see Func); a plugin that calls Serve itself sets them all.
type Options struct {
	// Upstream is the API server to forward to: Host, TLS settings and Proxy, as
	// execcred.ClusterConfig gives them. Without Proxy, HTTP(S)_PROXY and NO_PROXY apply.
	Upstream *rest.Config
	// LockFilePath is the client's spec.lockFilePath: a regular file (not a link) that
	// the client holds an exclusive flock on. Serve opens it once, at start, and returns
	// once the client no longer holds its lock; it never creates the file. Required.
	LockFilePath string
	// SocketDir holds the socket (created 0700; an existing one must be the user's own and
	// not writable by others); stale sockets in it are removed.
	SocketDir string
	// IdentityFile, if set, keeps the proxy's CA and certificates (0600), so that a proxy
	// restarted for the same client keeps what the client trusts. Its directory must be
	// the user's own and not writable by others; a link or FIFO in its place is refused.
	IdentityFile string
	// IdleTimeout, if positive, ends Serve after that long without an open connection;
	// upgraded streams (exec, attach, port-forward) count as open until they end.
	IdleTimeout time.Duration
	// ModifyRequest, if set, may change each outgoing request (add headers, sign it). It
	// sees the request as it will be written: without the hop-by-hop fields, and with a
	// User-Agent sent twice reduced to its first line, as Go's transports send it. A
	// request whose Connection header names an end-to-end field never gets here (400).
	ModifyRequest func(*http.Request) error
	// GetClientCertificate, if set, presents a TLS client certificate to the API server,
	// e.g. one whose key is a crypto.Signer held in hardware.
	GetClientCertificate func(*tls.CertificateRequestInfo) (*tls.Certificate, error)
	// ClientSessionCache, if set, lets connections to the API server resume TLS sessions,
	// so that a hardware-held client key signs once per full handshake, not per connection.
	ClientSessionCache tls.ClientSessionCache
	// RenewConnections, if set, retires the pool of connections to the API server on each
	// receive, so that later requests open new connections, e.g. with a rotated client
	// certificate (keys.ClientCertificate.Watch); requests in flight (watches, upgraded
	// streams) finish on the old ones. The owner closes the channel once Serve has returned.
	RenewConnections <-chan struct{}
	// Ready is called once the proxy listens, with the ExecCredential status the plugin
	// must print (plugin.Write adds apiVersion and kind). Run sets it.
	Ready func(*execcred.Status)
	// Logger receives proxy errors; nil discards them.
	Logger *slog.Logger
	// Metrics, if set, records requests, errors and latency.
	Metrics *Metrics
}

// Serve runs the proxy until ctx ends, the client's lock is released, or the idle timeout
// passes. It removes its socket before returning.
func Serve(ctx context.Context, o Options) error {
	if err := o.validate(); err != nil {
		return err
	}
	lock, err := openClientLock(o.LockFilePath, o.logger())
	if err != nil {
		return err
	}
	defer lock.Close()
	id, err := loadOrCreateIdentity(o.IdentityFile)
	if err != nil {
		return err
	}
	tlsConfig, err := id.tlsConfig()
	if err != nil {
		return err
	}
	ln, path, err := listen(o.SocketDir)
	if err != nil {
		return err
	}
	defer os.Remove(path)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	conns := newConnTracker(o.IdleTimeout, func() { cancel(errIdle) })
	handler, err := newHandler(o, conns.hijackedClosed)
	if err != nil {
		return err
	}
	var handlers sync.WaitGroup
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			handlers.Add(1)
			defer handlers.Done()
			handler.ServeHTTP(w, r)
		}),
		TLSConfig:         tlsConfig,
		Protocols:         hopProtocols(),
		ReadHeaderTimeout: 30 * time.Second, // no Read/WriteTimeout: they would cut watches and exec sessions
		ConnState:         conns.connState,
	}
	// kube-apiserver's header limits, not Go's: from Go 1.27 on, Go's own would refuse a
	// request with more than 500 header values, such as a user's 600 Impersonate-Group lines.
	reverseproxy.LimitHeaders(srv, reverseproxy.MaxHeaderBytes)
	var wg sync.WaitGroup
	wg.Go(func() { waitForClientExit(ctx, lock, cancel) })
	serveErr := make(chan error, 1)
	wg.Go(func() { serveErr <- srv.ServeTLS(ln, "", "") })

	if o.Ready != nil {
		o.Ready(&execcred.Status{
			ClientCertificateData: string(id.ClientCert),
			ClientKeyData:         string(id.ClientKey),
			ProxyConfig:           &execcred.ProxyConfig{URL: "unix://" + path, CertificateAuthorityData: id.CAPEM},
		})
	}
	var err2 error
	select {
	case <-ctx.Done():
	case err2 = <-serveErr:
		cancel(err2)
	}
	conns.stopTimer()
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	_ = srv.Shutdown(shutdownCtx)
	done()
	_ = srv.Close()
	conns.closeHijacked() // neither Shutdown nor Close touches upgraded (hijacked) connections
	handlers.Wait()
	wg.Wait()
	if errors.Is(err2, http.ErrServerClosed) {
		err2 = nil
	}
	cause := context.Cause(ctx)
	switch {
	case err2 != nil:
		return fmt.Errorf("exec proxy: serving %s: %w", path, err2)
	case errors.Is(cause, errClientGone), errors.Is(cause, errIdle), errors.Is(cause, context.Canceled):
		return nil
	}
	return cause
}

func (o *Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// hopProtocols is HTTP/1.1 only for the hop from the client. Over a local socket a
// connection per concurrent request costs little, and HTTP/2's framing and per-stream
// goroutines cost about 40 µs a request (docs/benchmarks.md).
func hopProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	return p
}

var (
	errClientGone = errors.New("client exited")
	errIdle       = errors.New("idle timeout")
)

func (o *Options) validate() error {
	switch {
	case o.LockFilePath == "":
		return errNoLock
	case o.Upstream == nil || o.Upstream.Host == "":
		return errors.New("exec proxy: no API server to forward to: set provideClusterInfo: true in the kubeconfig's exec block")
	case o.SocketDir == "":
		return errors.New("exec proxy: SocketDir is empty")
	}
	return nil
}

// listen creates a socket with a fresh name in dir (0700), readable only by its owner.
func listen(dir string) (net.Listener, string, error) {
	if err := ensurePrivateDir(dir); err != nil {
		return nil, "", err
	}
	removeStaleSockets(dir)
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, "proxy-"+hex.EncodeToString(b)+".sock")
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "unix", path)
	if err != nil {
		return nil, "", fmt.Errorf("exec proxy: listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, "", err
	}
	return ln, path, nil
}

// removeStaleSockets unlinks sockets in dir that nothing listens on any more (a proxy that
// was killed): only a refused connection says so. A socket that accepts a connection is
// live, and so is one that fails otherwise (its backlog is full, it is slow to answer):
// those are left alone.
func removeStaleSockets(dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, "proxy-*.sock"))
	for _, m := range matches {
		if info, err := os.Lstat(m); err != nil || info.Mode().Type() != fs.ModeSocket {
			continue
		}
		d := net.Dialer{Timeout: time.Second}
		conn, err := d.DialContext(context.Background(), "unix", m)
		if err == nil {
			_ = conn.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			_ = os.Remove(m)
		}
	}
}
