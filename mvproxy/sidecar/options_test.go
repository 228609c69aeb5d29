package sidecar

import (
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/mvproxy"
)

// New refuses a sidecar its peers would refuse, and an Identifier that would let users
// assert any identity, with errors a caller can tell apart (the CLI names its flags in
// them).
func TestNewRefusesWhatPeersOrUsersCouldAbuse(t *testing.T) {
	c := newTestCAs(t)
	b := c.startBackend(t, "server-0", discoverytest.Document("/v1/pods"))
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	other := testpki.NewTestCA(t, "other")
	tests := []struct {
		name   string
		change func(*Options)
		check  func(error) string // "" when err is the one wanted
	}{
		{"valid", func(*Options) {}, func(err error) string {
			if err != nil {
				return "refused: " + err.Error()
			}
			return ""
		}},
		{"serving certificate from another CA than PeerRootCAs", func(o *Options) { o.PeerRootCAs = other.Pool() }, func(err error) string {
			var pce *PeerCertificateError
			var unknown x509.UnknownAuthorityError
			if !errors.As(err, &pce) || pce.Peer || pce.ServerName != mvproxy.DefaultPeerServerName || !errors.As(err, &unknown) {
				return "want a *PeerCertificateError for the serving certificate, unknown authority"
			}
			return ""
		}},
		{"peer certificate from another CA than PeerRootCAs", func(o *Options) { o.GetPeerCertificate = static(servingCert(t, other)) }, func(err error) string {
			var pce *PeerCertificateError
			if !errors.As(err, &pce) || !pce.Peer {
				return "want a *PeerCertificateError for the peer certificate"
			}
			return ""
		}},
		{"serving certificate without PeerServerName", func(o *Options) { o.PeerServerName = "peers.example" }, func(err error) string {
			var pce *PeerCertificateError
			var hostname x509.HostnameError
			if !errors.As(err, &pce) || pce.ServerName != "peers.example" || !errors.As(err, &hostname) {
				return "want a *PeerCertificateError with a hostname error"
			}
			return ""
		}},
		{"one CA for users and front proxies, any name allowed", func(o *Options) {
			o.Identifier = &mvproxy.CertIdentifier{ClientCAs: c.frontCA.Pool(), RequestHeaderCAs: c.frontCA.Pool()}
		}, func(err error) string {
			if !errors.Is(err, mvproxy.ErrSharedClientCA) {
				return "want mvproxy.ErrSharedClientCA"
			}
			return ""
		}},
		{"one CA for users and front proxies, names limited", func(o *Options) {
			o.Identifier = &mvproxy.CertIdentifier{ClientCAs: c.frontCA.Pool(), RequestHeaderCAs: c.frontCA.Pool(), AllowedNames: []string{"front-proxy-client"}}
		}, func(err error) string {
			if err != nil {
				return "refused: " + err.Error()
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _ := c.options(t, "server-0", b, ln)
			tt.change(&o)
			_, err := New(o)
			if msg := tt.check(err); msg != "" {
				t.Errorf("New: %v: %s", err, msg)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "sidecar: options: ") {
				t.Errorf("New: %q lacks the context prefix", err)
			}
		})
	}
}
