package bench

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"

	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/mvproxy"
)

// identifyCase is a request carrying a client certificate, as the sidecar receives it
// after the TLS handshake, and the CAs that tell a user's certificate from a front
// proxy's.
type identifyCase struct {
	clientCA, frontCA *testpki.CA
	user, front       *http.Request
}

func newIdentifyCase(tb testing.TB) identifyCase {
	tb.Helper()
	c := identifyCase{clientCA: testpki.NewTestCA(tb, "client-ca"), frontCA: testpki.NewTestCA(tb, "front-proxy-ca")}
	request := func(ca *testpki.CA, cn string, header http.Header) *http.Request {
		kp, err := ca.IssueClient(cn, cn, "dev")
		if err != nil {
			tb.Fatal(err)
		}
		block, _ := pem.Decode(kp.CertPEM)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			tb.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodGet, "https://sidecar/api/v1/namespaces/default/pods", nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
		for k, v := range header {
			r.Header[k] = v
		}
		return r
	}
	c.user = request(c.clientCA, "alice", nil)
	c.front = request(c.frontCA, "front-proxy-client", http.Header{"X-Remote-User": {"bob"}, "X-Remote-Group": {"dev"}})
	return c
}

// kubeAPIServer is the chain kube-apiserver builds for client certificates: the
// request-header authenticator (its front-proxy CA, allowed names, X-Remote-* headers)
// first, then the x509 authenticator (the client CA, common name as user).
func (c identifyCase) kubeAPIServer(tb testing.TB) authenticator.Request {
	tb.Helper()
	opts := func(ca *testpki.CA) x509.VerifyOptions {
		o := x509request.DefaultVerifyOptions()
		o.Roots = ca.Pool()
		return o
	}
	headers, err := headerrequest.New([]string{"X-Remote-User"}, []string{"X-Remote-Uid"}, []string{"X-Remote-Group"}, []string{"X-Remote-Extra-"})
	if err != nil {
		tb.Fatal(err)
	}
	return union.New(
		x509request.NewVerifier(opts(c.frontCA), headers, sets.NewString("front-proxy-client")),
		x509request.New(opts(c.clientCA), x509request.CommonNameUserConversion),
	)
}

// fresh is r with headers of its own: kube-apiserver's request-header authenticator
// removes the X-Remote-* headers it has read.
func fresh(r *http.Request) *http.Request {
	c := *r
	c.Header = r.Header.Clone()
	return &c
}

func (c identifyCase) kplug() *mvproxy.CertIdentifier {
	return &mvproxy.CertIdentifier{ClientCAs: c.clientCA.Pool(), RequestHeaderCAs: c.frontCA.Pool(), AllowedNames: []string{"front-proxy-client"}}
}

// TestClientCertificateIdentityMatchesKubeAPIServer: the sidecar names the same user as
// kube-apiserver's authenticators for a user's certificate and a front proxy's, on the
// first request and on the next ones (which it answers from its memory of the chain).
func TestClientCertificateIdentityMatchesKubeAPIServer(t *testing.T) {
	c := newIdentifyCase(t)
	upstream, ours := c.kubeAPIServer(t), c.kplug()
	for name, r := range map[string]*http.Request{"user": c.user, "front proxy": c.front} {
		resp, ok, err := upstream.AuthenticateRequest(fresh(r))
		if err != nil || !ok {
			t.Fatalf("%s: kube-apiserver: ok=%v err=%v", name, ok, err)
		}
		for range 2 {
			caller, err := ours.Identify(fresh(r))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if caller.User.Name != resp.User.GetName() || len(caller.User.Groups) != 1 || caller.User.Groups[0] != "dev" {
				t.Fatalf("%s: kplug %+v, kube-apiserver %s %v", name, caller.User, resp.User.GetName(), resp.User.GetGroups())
			}
		}
	}
}

// BenchmarkClientCertificateIdentity: telling who sent a request from its client
// certificate, per request, as kube-apiserver's authenticators do it and as the sidecar's
// CertIdentifier does (which verifies a chain once a minute, not on each request).
func BenchmarkClientCertificateIdentity(b *testing.B) {
	c := newIdentifyCase(b)
	upstream, ours := c.kubeAPIServer(b), c.kplug()
	for _, who := range []struct {
		name string
		r    *http.Request
	}{{"user", c.user}, {"front-proxy", c.front}} {
		b.Run(who.name+"/kube-apiserver", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, err := upstream.AuthenticateRequest(fresh(who.r)); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
		b.Run(who.name+"/kplug", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ours.Identify(fresh(who.r)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
