package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/kplug/kplug/internal/reverseproxy"
)

// Serve listens (on Options.Listener, or on ListenAddress), serves clients and peers
// there over TLS with kube-apiserver's server limits, and keeps local discovery, the
// peers and the identity Lease up to date, until ctx ends or serving fails. Then it stops
// accepting connections, lets requests in progress finish for up to ShutdownTimeout
// (closing what is still open after it, such as watches), deletes its Lease and returns:
// nil after ctx ended, the error otherwise. Serve is called once.
//
// It forwards nothing before it has read which identity headers the local kube-apiserver
// reads from front proxies (the ConfigMap kube-system/extension-apiserver-authentication)
// and found them to be the X-Remote-* it sets and removes: until then, it answers every
// request 503 and publishes no Lease, and retries the reading with backoff (the apiserver
// may not be up yet, or the sidecar's user not yet allowed to read it), logging why. It
// reads them again every RequestHeaderRefresh: a reading that fails answers 503 again
// until one succeeds. Names that do not fit end Serve with a *RequestHeaderError; an
// apiserver that keeps refusing the sidecar's user the Leases of Namespace (403, for
// some seconds: RBAC applied a moment ago may not have reached its authorizer yet) ends
// it with a *LeaseAccessError.
func (s *Sidecar) Serve(ctx context.Context) error {
	ln := s.o.Listener
	if ln == nil {
		var err error
		if ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", s.o.ListenAddress); err != nil {
			return fmt.Errorf("sidecar: listening on %s: %w", s.o.ListenAddress, err)
		}
	}
	address := s.o.Address
	if address == "" {
		address = ln.Addr().String()
	}
	gate := newHeaderGate(&s.o)
	srv := reverseproxy.NewServer(gate.Wrap(s.handler), serverTLSConfig(selectCertificate(s.o.PeerServerName, s.o.GetPeerCertificate, s.o.GetServingCertificate)),
		slog.NewLogLogger(s.o.Logger.Handler(), slog.LevelDebug)) // TLS handshakes that clients abort
	// Anyone who reaches the listener can send requests with 1 MiB of header and never
	// take their answers: the guard bounds what they hold, and for how long.
	s.guard.Protect(srv)
	ln = s.guard.Listener(ln)
	s.o.Logger.Info("peerproxy serving", "address", ln.Addr().String(), "id", s.o.ID, "advertise", address, "apiserver", s.o.LocalURL)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu      sync.Mutex
		refused error // the first refusal; written before ServeTLS returns, read after
	)
	refuse := func(err error) {
		mu.Lock()
		if refused == nil {
			refused = err
		}
		mu.Unlock()
		stop()
	}
	err := reverseproxy.ServeTLS(runCtx, srv, ln, s.o.ShutdownTimeout, func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := gate.Run(ctx); err != nil {
				refuse(asRequestHeaderError(err))
			}
		})
		wg.Go(func() {
			if err := s.checkLeaseAccess(ctx); err != nil {
				refuse(err)
			}
		})
		wg.Go(func() { s.run(ctx, address, gate.Opened()) })
		wg.Wait()
	})
	if refused != nil {
		return fmt.Errorf("sidecar: %w", refused)
	}
	if err != nil {
		return fmt.Errorf("sidecar: serving: %w", err)
	}
	s.o.Logger.Info("peerproxy stopped")
	return nil
}

// serverTLSConfig is the TLS configuration of the sidecar's listener: it serves the
// certificate getCertificate chooses, offers HTTP/2 and HTTP/1.1 (upgrades need the
// latter), and asks for, without requiring, a client certificate, which the Identifier
// then checks.
func serverTLSConfig(getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{
		GetCertificate: getCertificate,
		ClientAuth:     tls.RequestClientCert,
		NextProtos:     []string{"h2", "http/1.1"},
		MinVersion:     tls.VersionTLS12,
	}
}

// selectCertificate returns a tls.Config.GetCertificate that presents peer to
// connections asking for peerServerName (SNI), as peers do, and serving to all others.
// So peers can verify each other with a dedicated peer CA while clients keep verifying
// the sidecar as they verify the apiserver. A nil peer always presents serving.
func selectCertificate(peerServerName string, peer, serving func() (*tls.Certificate, error)) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if peer != nil && strings.EqualFold(hello.ServerName, peerServerName) {
			return peer()
		}
		return serving()
	}
}

// verifyPeerCertificate reports, with the x509 error, whether peers that verify with
// roots for serverName accept cert, the certificate a sidecar presents to them.
func verifyPeerCertificate(cert *tls.Certificate, roots *x509.CertPool, serverName string) error {
	if len(cert.Certificate) == 0 {
		return errors.New("no certificate")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return err
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: serverName, Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// newTransport speaks HTTP/2 to the local apiserver and peers, and HTTP/1.1 for SPDY and
// WebSocket upgrades (exec, attach, port-forward), which must pass through; they are
// near, so 5 s bound a dial and a ping.
func newTransport(c *tls.Config) *reverseproxy.UpstreamTransport {
	return reverseproxy.NewUpstreamTransport(c, 5*time.Second)
}
