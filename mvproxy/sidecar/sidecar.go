package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kplug/kplug/internal/reverseproxy"
	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// Options configure a Sidecar. Required: ID, ListenAddress or Listener, LocalURL,
// LocalClient, Client, GetServingCertificate, GetProxyClientCertificate, PeerRootCAs and
// Identifier; the rest have defaults.
type Options struct {
	// ID names this sidecar's identity Lease; unique among the sidecars of a cluster.
	ID string
	// ListenAddress is the host:port Serve listens on, over TLS, for clients and peers.
	ListenAddress string
	// Listener, if set, is served instead of listening on ListenAddress: a socket handed
	// over by a service manager, or one whose port the caller picked.
	Listener net.Listener
	// Address is the host:port where peers reach this sidecar, advertised in its Lease.
	// Default: the address it listens on, which must then name a host.
	Address string
	// Namespace holds the identity Leases; default DefaultNamespace. The sidecar's user
	// must be allowed to get, list, watch, create, update and delete Leases there: Serve
	// ends with a *LeaseAccessError when it is not.
	Namespace string

	// GetServingCertificate returns the certificate presented to clients, who verify it
	// as they verify the apiserver; it is asked at every new connection, so rotated
	// certificates are served (see CertificateFiles).
	GetServingCertificate func() (*tls.Certificate, error)
	// GetPeerCertificate, if set, returns the certificate presented to connections that
	// ask for PeerServerName (TLS SNI), as peers do: one from the peer CA. Without it,
	// peers get the serving certificate.
	GetPeerCertificate func() (*tls.Certificate, error)

	// LocalURL is the local kube-apiserver, https://host:port.
	LocalURL string
	// LocalRootCAs verify the local kube-apiserver's serving certificate.
	LocalRootCAs *x509.CertPool
	// LocalClient reads the local server's discovery with the sidecar's own credentials.
	LocalClient *http.Client
	// Client manages and watches the identity Leases.
	Client kubernetes.Interface

	// GetProxyClientCertificate returns the front-proxy client certificate, presented to
	// the local apiserver when forwarding a user named by X-Remote-* headers, and to peers
	// always; it is asked at every new connection.
	GetProxyClientCertificate func() (*tls.Certificate, error)
	// PeerRootCAs verify peers' serving certificates: a Lease's address is used only if
	// the server there proves itself with a certificate from this CA for PeerServerName.
	// A CA that signs only sidecars' peer certificates is best (see GetPeerCertificate).
	PeerRootCAs *x509.CertPool
	// PeerServerName is the name a peer's serving certificate must hold, whatever address
	// its Lease names; it is also sent as the TLS server name (SNI). Default
	// mvproxy.DefaultPeerServerName.
	PeerServerName string
	// Identifier tells client-certificate users and trusted peers apart.
	Identifier *mvproxy.CertIdentifier

	// LeaseDuration (default 30s), LocalRefresh (default 10s), PeerRefresh (default 1m),
	// PeerTimeout (default 5s), and ShutdownTimeout (default 10s), how long Serve lets
	// requests finish once its context ends.
	LeaseDuration, LocalRefresh, PeerRefresh, PeerTimeout, ShutdownTimeout time.Duration
	// RequestHeaderRefresh (default 10s) is how often Serve reads again which identity
	// headers the local kube-apiserver reads, and the longest wait between two readings
	// that fail.
	RequestHeaderRefresh time.Duration

	// Metrics, if set, records the proxy's metrics.
	Metrics *mvproxy.Metrics
	// Logger receives what the sidecar does and every failure; nil discards.
	Logger *slog.Logger

	// guard bounds connections, the headers of requests in progress and responses
	// their clients do not take; zero: reverseproxy.DefaultGuardLimits. Tests shorten it.
	guard reverseproxy.GuardLimits
	// leaseForbiddenGrace is how long the apiserver may keep refusing the Leases before
	// Serve gives up (RBAC applied a moment ago takes that long to reach its
	// authorizer); zero: 10s. Tests shorten it.
	leaseForbiddenGrace time.Duration
}

// Sidecar is the mixed version proxy beside a stock kube-apiserver. Serve runs it.
type Sidecar struct {
	o     Options
	dir   *mvproxy.Directory
	local *LocalDiscovery
	// renewLease asks the LeaseKeeper to renew at once: the local discovery changed.
	renewLease chan struct{}
	handler    http.Handler
	peers      *reverseproxy.UpstreamTransport
	transport  []*reverseproxy.UpstreamTransport
	guard      *reverseproxy.Guard
}

// New checks o and builds the sidecar. It reports every error at once (errors.Join),
// among them a *PeerCertificateError when peers would refuse the certificate presented to
// them, and mvproxy.ErrSharedClientCA when Identifier would let users assert any identity
// (CertIdentifier.Validate).
func New(o Options) (*Sidecar, error) {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	o.leaseForbiddenGrace = orDefault(o.leaseForbiddenGrace, 10*time.Second)
	if o.PeerServerName == "" {
		o.PeerServerName = mvproxy.DefaultPeerServerName
	}
	o.LeaseDuration = orDefault(o.LeaseDuration, 30*time.Second)
	o.LocalRefresh = orDefault(o.LocalRefresh, 10*time.Second)
	o.PeerRefresh = orDefault(o.PeerRefresh, time.Minute)
	o.PeerTimeout = orDefault(o.PeerTimeout, 5*time.Second)
	o.ShutdownTimeout = orDefault(o.ShutdownTimeout, 10*time.Second)
	o.RequestHeaderRefresh = orDefault(o.RequestHeaderRefresh, 10*time.Second)
	if o.guard == (reverseproxy.GuardLimits{}) {
		o.guard = reverseproxy.DefaultGuardLimits()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	local, err := o.validate()
	if err != nil {
		return nil, fmt.Errorf("sidecar: options: %w", err)
	}

	s := &Sidecar{o: o, dir: mvproxy.NewDirectory(o.ID), renewLease: make(chan struct{}, 1), guard: reverseproxy.NewGuard(o.guard)}
	clientCert := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return o.GetProxyClientCertificate() }
	localPlain := newTransport(&tls.Config{RootCAs: o.LocalRootCAs, MinVersion: tls.VersionTLS12})
	localProxy := newTransport(&tls.Config{RootCAs: o.LocalRootCAs, GetClientCertificate: clientCert, MinVersion: tls.VersionTLS12})
	s.peers = newTransport(&tls.Config{
		RootCAs:              o.PeerRootCAs,
		GetClientCertificate: clientCert,
		ServerName:           o.PeerServerName,
		MinVersion:           tls.VersionTLS12,
	})
	s.transport = []*reverseproxy.UpstreamTransport{localPlain, localProxy, s.peers}

	s.local = &LocalDiscovery{
		Directory: s.dir,
		Fetch: func(ctx context.Context) (*discovery.Document, error) {
			return discovery.Fetch(ctx, o.LocalClient, o.LocalURL, nil)
		},
		Interval:    o.LocalRefresh,
		MinInterval: time.Second,
		OnError: func(err error) {
			o.Logger.Warn("refreshing local discovery", "err", err)
		},
		// Peers learn of a change through the Lease (DiscoveryAnnotation).
		OnChange: func() {
			select {
			case s.renewLease <- struct{}{}:
			default: // a renewal is already due
			}
		},
	}
	s.handler, err = mvproxy.NewHandler(mvproxy.HandlerOptions{
		Local:         newLocalProxy(local, localPlain, localProxy, s.dir, o.Metrics, o.Logger, s.local.RefreshSoon),
		Directory:     s.dir,
		PeerTransport: s.peers,
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

// validate checks the options and returns the local apiserver's URL.
func (o *Options) validate() (*url.URL, error) {
	var errs []error
	if o.ID == "" {
		errs = append(errs, errors.New("ID is empty"))
	}
	switch {
	case o.Listener == nil && o.ListenAddress == "":
		errs = append(errs, errors.New("ListenAddress or Listener is required"))
	case o.Address != "":
		if err := validAddress(o.Address); err != nil {
			errs = append(errs, fmt.Errorf("address %q: %w", o.Address, err))
		}
	case !namesHost(o.listenAddress()):
		errs = append(errs, fmt.Errorf("listen address %q names no host peers could reach: Address is required", o.listenAddress()))
	}
	local, err := url.Parse(o.LocalURL)
	if err != nil || local.Scheme != "https" || local.Host == "" {
		errs = append(errs, fmt.Errorf("local apiserver URL %q: want https://host:port", o.LocalURL))
	}
	if o.LocalClient == nil || o.Client == nil {
		errs = append(errs, errors.New("LocalClient and Client are required"))
	}
	if o.PeerRootCAs == nil || o.Identifier == nil || o.GetServingCertificate == nil || o.GetProxyClientCertificate == nil {
		errs = append(errs, errors.New("PeerRootCAs, Identifier, GetServingCertificate and GetProxyClientCertificate are required"))
	} else {
		errs = append(errs, o.checkPeerCertificate(), o.Identifier.Validate())
	}
	return local, errors.Join(errs...)
}

// PeerCertificateError is New's refusal of a sidecar its peers would refuse: the
// certificate it presents to them does not verify with PeerRootCAs for PeerServerName.
type PeerCertificateError struct {
	// Peer is true when the certificate is GetPeerCertificate's, false when peers get
	// GetServingCertificate's.
	Peer bool
	// ServerName is the PeerServerName the certificate was verified for.
	ServerName string
	// Err is the certificate getter's error or the x509 verification error.
	Err error
}

func (e *PeerCertificateError) Error() string {
	which := "serving certificate (GetServingCertificate)"
	if e.Peer {
		which = "peer certificate (GetPeerCertificate)"
	}
	return fmt.Sprintf("peers would refuse the %s presented to them: it does not verify with PeerRootCAs for PeerServerName %q: %v", which, e.ServerName, e.Err)
}

func (e *PeerCertificateError) Unwrap() error { return e.Err }

// checkPeerCertificate refuses, with a *PeerCertificateError, a sidecar its peers would
// refuse.
func (o *Options) checkPeerCertificate() error {
	peer, get := o.GetPeerCertificate != nil, o.GetServingCertificate
	if peer {
		get = o.GetPeerCertificate
	}
	cert, err := get()
	if err == nil {
		err = verifyPeerCertificate(cert, o.PeerRootCAs, o.PeerServerName)
	}
	if err != nil {
		return &PeerCertificateError{Peer: peer, ServerName: o.PeerServerName, Err: err}
	}
	return nil
}

func (o *Options) listenAddress() string {
	if o.Listener != nil {
		return o.Listener.Addr().String()
	}
	return o.ListenAddress
}

// namesHost reports whether addr is host:port with a host that is not the unspecified
// address, so that peers can reach it.
func namesHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && host != "" && !net.ParseIP(host).IsUnspecified()
}

// run keeps local discovery fresh, follows the peers and, once leaseFrom is closed, keeps
// the identity Lease, for address, until ctx ends; then it deletes the Lease and returns.
func (s *Sidecar) run(ctx context.Context, address string, leaseFrom <-chan struct{}) {
	watcher := &PeerWatcher{
		Client: s.o.Client, Namespace: s.o.Namespace, Directory: s.dir, PeerClient: &http.Client{Transport: s.peers},
		Timeout: s.o.PeerTimeout, Refresh: s.o.PeerRefresh, Metrics: s.o.Metrics, Logger: s.o.Logger,
	}
	keeper := &LeaseKeeper{
		Client: s.o.Client, Namespace: s.o.Namespace, Name: s.o.ID, Address: address,
		Duration: s.o.LeaseDuration, Logger: s.o.Logger,
		Discovery: func() string { return strconv.FormatUint(s.dir.LocalGeneration(), 10) },
		RenewNow:  s.renewLease,
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.local.Run(ctx) })
	wg.Go(func() { watcher.Run(ctx) })
	wg.Go(func() {
		select {
		case <-leaseFrom:
			keeper.Run(ctx)
		case <-ctx.Done():
		}
	})
	wg.Wait()
	for _, t := range s.transport {
		t.CloseIdleConnections()
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
