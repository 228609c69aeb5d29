package verifier

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/requestheader"
	"github.com/kplug/kplug/internal/reverseproxy"
)

// DefaultReloadInterval is how often a Proxy reads its configuration file for changes.
const DefaultReloadInterval = 10 * time.Second

// ProxyOptions configure NewProxy.
type ProxyOptions struct {
	// ConfigFile is the AuthenticationConfiguration file; required.
	ConfigFile string
	// ReloadInterval is how often ConfigFile is read for changes; zero means
	// DefaultReloadInterval, negative never.
	ReloadInterval time.Duration
	// Upstream, Transport and Headers are as in HandlerOptions.
	Upstream  *url.URL
	Transport http.RoundTripper
	Headers   RequestHeaders
	// GetServingCertificate returns the certificate served to clients; required.
	GetServingCertificate func() (*tls.Certificate, error)
	// Listener is where to serve; nil means listen on ListenAddress.
	Listener      net.Listener
	ListenAddress string
	// ShutdownTimeout is how long requests in progress may finish after ctx ends; zero
	// means 10 s. Watches still open after it are closed.
	ShutdownTimeout time.Duration
	// Metrics and Logger as in Options and HandlerOptions.
	Metrics *Metrics
	Logger  *slog.Logger
	// MaxConnections bounds the client connections open at once. A quarter of them may
	// be unauthenticated (no request on them has authenticated yet) and a quarter one
	// user's; a new connection closes the oldest unauthenticated one of the client host
	// that has the most, and waits to be accepted only while every connection is a user's.
	// Zero means DefaultMaxConnections.
	MaxConnections int
	// MaxHeaderBytes bounds a request's header; zero means DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// BodyBudget, BodyReadTimeout and RefusalWriteTimeout are as in HandlerOptions.
	BodyBudget          int64
	BodyReadTimeout     time.Duration
	RefusalWriteTimeout time.Duration
	// Client reads which identity headers kube-apiserver reads from front proxies (the
	// ConfigMap kube-system/extension-apiserver-authentication); nil means a client of
	// Upstream through Transport, as ReaderUsername. RequestHeaderRefresh is how often
	// they are read again; zero means 10 s.
	Client               kubernetes.Interface
	RequestHeaderRefresh time.Duration
}

// DefaultMaxConnections bounds a Proxy's client connections: what the 256 of them that
// may be unauthenticated can make the proxy hold is in docs/http-signatures.md ("Limits").
const DefaultMaxConnections = 1024

// Proxy is the signature proxy: Handler behind a TLS server, with its configuration
// reloaded when the file, or a certificateAuthorityFile it names, changes. Each load is
// logged with the trust anchors it added and removed. A reload that fails validation is
// logged and the previous configuration kept (KEP-6308 "Server configuration").
type Proxy struct {
	o       ProxyOptions
	handler *Handler
	gate    *requestheader.Gate
	gated   http.Handler // handler behind gate
	conns   *admission   // its connection policy (conns.go)
	auth    atomic.Pointer[Authenticator]
	content string // of the configuration in use; touched by Reload only
}

// NewProxy loads the configuration and checks o. Its errors are configuration errors.
func NewProxy(o ProxyOptions) (*Proxy, error) {
	if o.ConfigFile == "" {
		return nil, errors.New("verifier: no configuration file")
	}
	if o.GetServingCertificate == nil {
		return nil, errors.New("verifier: no serving certificate")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ReloadInterval == 0 {
		o.ReloadInterval = DefaultReloadInterval
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if len(o.Headers.Username) == 0 {
		o.Headers = DefaultRequestHeaders
	}
	if o.RequestHeaderRefresh <= 0 {
		o.RequestHeaderRefresh = 10 * time.Second
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	p := &Proxy{o: o}
	p.conns = p.admission()
	if _, err := p.Reload(); err != nil {
		return nil, err
	}
	h, err := NewHandler(HandlerOptions{Authenticator: p, Upstream: o.Upstream, Transport: o.Transport, Headers: o.Headers, Logger: o.Logger,
		BodyBudget: o.BodyBudget, BodyReadTimeout: o.BodyReadTimeout, RefusalWriteTimeout: o.RefusalWriteTimeout})
	if err != nil {
		return nil, err
	}
	p.handler = h
	if p.gate, err = newHeaderGate(o); err != nil {
		return nil, err
	}
	p.gated = p.gate.Wrap(h)
	return p, nil
}

// Authenticate authenticates with the configuration in use.
func (p *Proxy) Authenticate(req *http.Request) (*authenticationv1.UserInfo, error) {
	return p.auth.Load().Authenticate(req)
}

func (p *Proxy) authenticateSigned(req *http.Request) (*authenticationv1.UserInfo, []httpsig.Input, error) {
	return p.auth.Load().authenticateSigned(req)
}

// ServeHTTP is the Handler's once Serve has found that kube-apiserver reads no identity
// header the Handler does not remove; until then, 503 with Retry-After.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.gated.ServeHTTP(w, r) }

// Reload reads the configuration file and, if it or a certificateAuthorityFile it names
// changed and the result is valid, uses it from the next request on (with a fresh
// certificate cache: a CA removed from its file is trusted no more, also for certificates
// it already vouched for). It logs what changed (the files, and the trust anchors added
// and removed by authenticator, subject and SHA-256 fingerprint) and reports whether it
// changed the configuration; on error the configuration in use stays. Reload is not safe
// for concurrent use with itself; Serve calls it every ReloadInterval.
func (p *Proxy) Reload() (bool, error) {
	data, err := os.ReadFile(p.o.ConfigFile)
	if err != nil {
		return false, fmt.Errorf("verifier: reading the authentication configuration: %w", err)
	}
	old := p.auth.Load()
	configChanged := old == nil || string(data) != p.content
	if !configChanged && !old.cfg.FilesChanged() {
		return false, nil
	}
	cfg, err := ParseConfig(data, filepath.Dir(p.o.ConfigFile), p.o.Logger)
	if err != nil {
		return false, fmt.Errorf("%s: %w", p.o.ConfigFile, err)
	}
	auth := New(cfg, Options{Metrics: p.o.Metrics})
	// A resolver that does not answer, or states a ladder that does not validate, fails
	// the load rather than the requests that follow it.
	if err := auth.Check(context.Background()); err != nil {
		_ = auth.Close()
		return false, fmt.Errorf("%s: %w", p.o.ConfigFile, err)
	}
	p.auth.Store(auth)
	if old != nil {
		// Requests that began with the old configuration may still be asking its
		// resolvers; no call outlives two call timeouts.
		time.AfterFunc(2*ResolverCallTimeout, func() { _ = old.Close() })
	}
	p.content = string(data)
	p.logLoad(old, cfg, configChanged)
	return true, nil
}

// logLoad says what a load changed: the trust anchors that come and go say whom the
// proxy trusts from now on.
func (p *Proxy) logLoad(old *Authenticator, cfg *Config, configChanged bool) {
	if old == nil {
		p.o.Logger.Info("signature proxy: authentication configuration loaded", "file", p.o.ConfigFile, "authenticators", cfg.AuthenticatorNames(), "anchors", cfg.anchors())
		return
	}
	var files []string
	if configChanged {
		files = append(files, p.o.ConfigFile)
	}
	files = append(files, old.cfg.changedFiles()...)
	before, after := old.cfg.anchors(), cfg.anchors()
	p.o.Logger.Info("signature proxy: authentication configuration reloaded", "changed", files,
		"anchors_added", without(after, before), "anchors_removed", without(before, after), "authenticators", cfg.AuthenticatorNames())
}

// without is the elements of xs not in ys.
func without(xs, ys []string) []string {
	out := []string{}
	for _, x := range xs {
		if !slices.Contains(ys, x) {
			out = append(out, x)
		}
	}
	return out
}

// Serve listens, serves over TLS (HTTP/2 and HTTP/1.1, the latter for upgrades) with
// limits tighter than kube-apiserver's (server.go: MaxHeaderBytes of request header, read
// and the TLS handshake done within 10 s; idle connections closed after 90 s; over HTTP/2,
// 100 concurrent streams per connection, 16 KiB frames, 256 KiB buffered per stream and
// 512 KiB per connection; no write timeout, which would cut watches, but refusals are
// written within RefusalWriteTimeout) and MaxConnections connections under the admission
// of conns.go, follows the configuration file, and when ctx ends stops accepting
// connections, lets requests finish for up to ShutdownTimeout and returns nil; or returns
// the error that stopped serving. Serve is called once.
//
// It forwards nothing before it has read which identity headers kube-apiserver reads from
// front proxies (the ConfigMap kube-system/extension-apiserver-authentication, through
// Client) and found each among Headers, which it removes from clients' requests, and the
// ones it sets among them: until then it answers 503, and retries the reading with
// backoff, logging why it failed. It reads them again every RequestHeaderRefresh: a
// reading that fails answers 503 again until one succeeds (unless kube-apiserver is
// merely unavailable, or restarting: its /readyz not ok), and names that do not fit end
// Serve with an error naming the flag and the names.
func (p *Proxy) Serve(ctx context.Context) error {
	ln := p.o.Listener
	if ln == nil {
		var err error
		if ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", p.o.ListenAddress); err != nil {
			return fmt.Errorf("verifier: listening on %s: %w", p.o.ListenAddress, err)
		}
	}
	ln = p.conns.listener(ln)
	srv := reverseproxy.NewServer(p, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.o.GetServingCertificate() },
		NextProtos:     []string{"h2", "http/1.1"}, // upgrades need the latter
		MinVersion:     tls.VersionTLS12,
	}, slog.NewLogLogger(p.o.Logger.Handler(), slog.LevelDebug)) // handshakes clients abort
	p.limit(srv)
	p.o.Logger.Info("signature proxy serving", "address", ln.Addr().String(), "upstream", p.o.Upstream.String())
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var refused error // written before ServeTLS returns, read after
	err := reverseproxy.ServeTLS(runCtx, srv, ln, p.o.ShutdownTimeout, func(ctx context.Context) {
		var wg sync.WaitGroup
		if p.o.ReloadInterval > 0 {
			wg.Go(func() { p.follow(ctx) })
		}
		if err := p.gate.Run(ctx); err != nil {
			refused = err
			stop()
		}
		wg.Wait()
	})
	_ = p.auth.Load().Close()
	if refused != nil {
		return fmt.Errorf("verifier: %w", refused)
	}
	if err != nil {
		return fmt.Errorf("verifier: serving: %w", err)
	}
	return nil
}

// follow reloads the configuration every ReloadInterval until ctx ends.
func (p *Proxy) follow(ctx context.Context) {
	t := time.NewTicker(p.o.ReloadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := p.Reload(); err != nil {
			p.o.Logger.Warn("signature proxy: keeping the current authentication configuration; the changed file is invalid", "error", err)
		}
	}
}
