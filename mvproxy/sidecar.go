package mvproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// SidecarOptions configure a Sidecar.
type SidecarOptions struct {
	// ID names this sidecar's identity Lease; unique among the sidecars of a cluster.
	ID string
	// Address is the host:port where peers reach this sidecar.
	Address string
	// Namespace holds the identity Leases; default kube-system.
	Namespace string

	// LocalURL is the local kube-apiserver, https://host:port.
	LocalURL string
	// LocalRootCAs verify the local kube-apiserver's serving certificate.
	LocalRootCAs *x509.CertPool
	// LocalClient reads the local server's discovery with the sidecar's own credentials.
	LocalClient *http.Client
	// Client manages and watches the identity Leases.
	Client kubernetes.Interface

	// ProxyClientCert is presented to the local apiserver when forwarding a user named by
	// X-Remote-* headers, and to peers always. GetProxyClientCert, if set, is used instead,
	// at every new connection (see CertificateFiles).
	ProxyClientCert    tls.Certificate
	GetProxyClientCert func() (*tls.Certificate, error)
	// PeerRootCAs verify peers' serving certificates: a Lease's address is used only if
	// the server there proves itself with a certificate from this CA for PeerServerName.
	// A CA that signs only sidecars' peer certificates is best (see PeerCertificate).
	PeerRootCAs *x509.CertPool
	// PeerServerName is the name a peer's serving certificate must hold, whatever address
	// its Lease names; it is also sent as the TLS server name (SNI). Default
	// DefaultPeerServerName.
	PeerServerName string
	// Identifier tells client-certificate users and trusted peers apart.
	Identifier *CertIdentifier

	// LeaseDuration (default 30s), LocalRefresh (default 10s), PeerRefresh (default 1m),
	// PeerTimeout (default 5s).
	LeaseDuration, LocalRefresh, PeerRefresh, PeerTimeout time.Duration

	Metrics *Metrics
	Logger  *slog.Logger
}

// DefaultPeerServerName is the name peers' serving certificates must hold by default: the
// name kube-apiserver's own peer proxy requires of its peers, which apiserver serving
// certificates carry and kubelet or workload certificates from the same CA do not.
const DefaultPeerServerName = "kubernetes.default.svc"

// Sidecar is the mixed version proxy beside a stock kube-apiserver: an http.Handler for
// its TLS listener (see ServerTLSConfig), and Run for its background work.
type Sidecar struct {
	o         SidecarOptions
	dir       *Directory
	local     *LocalCache
	handler   *Handler
	transport []*http.Transport
}

// NewSidecar checks o and builds the sidecar.
func NewSidecar(o SidecarOptions) (*Sidecar, error) {
	var errs []error
	if o.ID == "" {
		errs = append(errs, errors.New("ID is empty"))
	}
	if err := validAddress(o.Address); err != nil {
		errs = append(errs, fmt.Errorf("address %q: %w", o.Address, err))
	}
	local, err := url.Parse(o.LocalURL)
	if err != nil || local.Scheme != "https" || local.Host == "" {
		errs = append(errs, fmt.Errorf("local apiserver URL %q: want https://host:port", o.LocalURL))
	}
	if o.LocalClient == nil || o.Client == nil {
		errs = append(errs, errors.New("LocalClient and Client are required"))
	}
	if o.PeerRootCAs == nil || o.Identifier == nil || (len(o.ProxyClientCert.Certificate) == 0 && o.GetProxyClientCert == nil) {
		errs = append(errs, errors.New("PeerRootCAs, Identifier and ProxyClientCert are required"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("mvproxy: sidecar options: %w", errors.Join(errs...))
	}
	if o.Namespace == "" {
		o.Namespace = "kube-system"
	}
	o.LeaseDuration = orDefault(o.LeaseDuration, 30*time.Second)
	o.LocalRefresh = orDefault(o.LocalRefresh, 10*time.Second)
	o.PeerRefresh = orDefault(o.PeerRefresh, time.Minute)
	o.PeerTimeout = orDefault(o.PeerTimeout, 5*time.Second)
	if o.PeerServerName == "" {
		o.PeerServerName = DefaultPeerServerName
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}

	s := &Sidecar{o: o, dir: NewDirectory(o.ID)}
	clientCert := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &o.ProxyClientCert, nil }
	if o.GetProxyClientCert != nil {
		clientCert = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return o.GetProxyClientCert() }
	}
	localPlain := newTransport(&tls.Config{RootCAs: o.LocalRootCAs, MinVersion: tls.VersionTLS12})
	localProxy := newTransport(&tls.Config{RootCAs: o.LocalRootCAs, GetClientCertificate: clientCert, MinVersion: tls.VersionTLS12})
	peers := newTransport(&tls.Config{
		RootCAs:              o.PeerRootCAs,
		GetClientCertificate: clientCert,
		ServerName:           o.PeerServerName,
		MinVersion:           tls.VersionTLS12,
	})
	s.transport = []*http.Transport{localPlain, localProxy, peers}

	s.local = &LocalCache{
		Directory: s.dir,
		Fetch: func(ctx context.Context) (*Document, error) {
			return FetchDiscovery(ctx, o.LocalClient, o.LocalURL, nil)
		},
		Interval:    o.LocalRefresh,
		MinInterval: time.Second,
		OnError: func(err error) {
			o.Logger.Warn("refreshing local discovery", "err", err)
		},
	}
	localHandler := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = local.Scheme, local.Host, ""
			pr.SetXForwarded()
			guard := guardSet(pr.In.Header) // only a trusted peer's survives to here
			deleteGuard(pr.Out.Header)
			if guard {
				pr.Out.Header.Set(ProxiedHeader, "true")
			}
			caller, _ := CallerFrom(pr.In.Context())
			setIdentityHeaders(pr.Out.Header, caller.User)
			if caller.User != nil {
				pr.Out.Header.Del("Authorization")
			}
		},
		Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if c, _ := CallerFrom(r.Context()); c.User != nil {
				return localProxy.RoundTrip(r)
			}
			return localPlain.RoundTrip(r)
		}),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			labels := GVR{} // not a resource request: discovery, health
			if gvr, ok := ResourceOf(r.URL.Path); ok {
				labels = s.dir.metricLabels(gvr)
			}
			o.Metrics.proxyError(ErrorLocalUnreachable, labels)
			// Addresses and dial errors go to the log, not to a client that may be anonymous.
			o.Logger.Warn("local apiserver unreachable", "url", o.LocalURL, "err", err)
			writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
				"mvproxy: the local apiserver is unreachable; see the proxy's log", retryAfterSeconds)
		},
		ErrorLog:   slogErrorLog(o.Logger),
		BufferPool: newBufferPool(),
	}
	s.handler, err = NewHandler(Options{
		Local:         localHandler,
		Directory:     s.dir,
		PeerTransport: peers,
		Identify:      o.Identifier.Identify,
		RefreshLocal:  s.local.Refresh,
		Metrics:       o.Metrics,
		Logger:        o.Logger,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Sidecar) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Directory returns what the sidecar knows about who serves what.
func (s *Sidecar) Directory() *Directory { return s.dir }

// Run keeps local discovery fresh, follows the peers and keeps the identity Lease until
// ctx ends; then it deletes the Lease and returns.
func (s *Sidecar) Run(ctx context.Context) {
	peerClient := &http.Client{Transport: s.transport[2]}
	watcher := &PeerWatcher{
		Client: s.o.Client, Namespace: s.o.Namespace, Directory: s.dir, PeerClient: peerClient,
		Timeout: s.o.PeerTimeout, Refresh: s.o.PeerRefresh, Metrics: s.o.Metrics, Logger: s.o.Logger,
	}
	keeper := &LeaseKeeper{
		Client: s.o.Client, Namespace: s.o.Namespace, Name: s.o.ID, Address: s.o.Address,
		Duration: s.o.LeaseDuration, Logger: s.o.Logger,
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.local.Run(ctx) })
	wg.Go(func() { watcher.Run(ctx) })
	wg.Go(func() { keeper.Run(ctx) })
	wg.Wait()
	for _, t := range s.transport {
		t.CloseIdleConnections()
	}
}

// ServerTLSConfig is the TLS configuration for the sidecar's listener: it serves cert,
// offers HTTP/2 and HTTP/1.1 (upgrades need the latter), and asks for, without requiring,
// a client certificate, which the Identifier then checks.
func ServerTLSConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequestClientCert,
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}
}

// NewServer returns the server for the sidecar's TLS listener (see ServerTLSConfig), with
// kube-apiserver's limits: at most 1 MiB of request headers, read within 32 s; idle
// connections closed after 90 s; over HTTP/2, at most 100 concurrent streams per
// connection, frames and per-stream receive buffers of 256 KiB, and 25 MiB of receive
// buffer per connection. errorLog may be nil.
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

// PeerCertificate returns a tls.Config.GetCertificate for the sidecar's listener that
// presents peer to connections asking for peerServerName (SNI), as peers do, and serving
// to all others. So peers can verify each other with a dedicated peer CA while clients
// keep verifying the sidecar as they verify the apiserver. A nil peer always presents
// serving.
func PeerCertificate(peerServerName string, peer, serving func() (*tls.Certificate, error)) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if peer != nil && strings.EqualFold(hello.ServerName, peerServerName) {
			return peer()
		}
		return serving()
	}
}

// newTransport speaks HTTP/1.1 only, so that SPDY and WebSocket upgrades (exec, attach,
// port-forward) pass through.
func newTransport(c *tls.Config) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     c,
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
