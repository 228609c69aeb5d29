package mvproxy_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/mvproxy"
)

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func clientCert(t *testing.T, ca *testpki.CA, user string, groups ...string) *x509.Certificate {
	t.Helper()
	kp, err := ca.IssueClient(user, user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return parseCert(t, kp.CertPEM)
}

func requestWith(cert *x509.Certificate, header http.Header) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "https://sidecar/api/v1/pods", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	for k, v := range header {
		r.Header[k] = v
	}
	return r
}

func identify(t *testing.T, id *mvproxy.CertIdentifier, r *http.Request) mvproxy.Caller {
	t.Helper()
	c, err := id.Identify(r)
	if err != nil {
		t.Fatalf("Identify: %v", err)
	}
	return c
}

// A client's certificate is verified once, not on each of its requests: after the first
// request, the chain is known good even to an identifier whose client CAs are (against
// its rules) emptied, while a refusal is never remembered.
func TestCertIdentifierRemembersAVerifiedChain(t *testing.T) {
	clientCA, frontCA := testpki.NewTestCA(t, "client-ca"), testpki.NewTestCA(t, "front-proxy-ca")
	alice, bob := clientCert(t, clientCA, "alice", "dev"), clientCert(t, clientCA, "bob")

	refusing := &mvproxy.CertIdentifier{ClientCAs: x509.NewCertPool(), RequestHeaderCAs: frontCA.Pool()}
	if _, err := refusing.Identify(requestWith(alice, nil)); err == nil {
		t.Fatal("alice's certificate passed an identifier without her CA")
	}
	refusing.ClientCAs = clientCA.Pool()
	if c := identify(t, refusing, requestWith(alice, nil)); c.User == nil || c.User.Name != "alice" {
		t.Fatalf("after the refusal, with her CA: %+v; the refusal was remembered", c.User)
	}

	id := &mvproxy.CertIdentifier{ClientCAs: clientCA.Pool(), RequestHeaderCAs: frontCA.Pool()}
	if c := identify(t, id, requestWith(alice, nil)); c.User == nil || c.User.Name != "alice" || c.FromPeer {
		t.Fatalf("alice: %+v", c)
	}
	id.ClientCAs = x509.NewCertPool()
	c := identify(t, id, requestWith(alice, nil))
	if c.User == nil || c.User.Name != "alice" || len(c.User.Groups) != 1 || c.User.Groups[0] != "dev" {
		t.Fatalf("alice again: %+v; her verified chain was not remembered", c.User)
	}
	if _, err := id.Identify(requestWith(bob, nil)); err == nil {
		t.Fatal("bob's certificate, never verified, passed on alice's remembered chain")
	}
}

// What a peer's certificate proves is remembered; the user its headers name is read from
// each request.
func TestCertIdentifierReadsEachPeerRequestsHeaders(t *testing.T) {
	clientCA, frontCA := testpki.NewTestCA(t, "client-ca"), testpki.NewTestCA(t, "front-proxy-ca")
	front := clientCert(t, frontCA, "front-proxy-client")
	id := &mvproxy.CertIdentifier{ClientCAs: clientCA.Pool(), RequestHeaderCAs: frontCA.Pool(), AllowedNames: []string{"front-proxy-client"}}
	for _, user := range []string{"carol", "dave", "carol"} {
		c := identify(t, id, requestWith(front, http.Header{"X-Remote-User": {user}}))
		if !c.FromPeer || c.User == nil || c.User.Name != user {
			t.Fatalf("peer request for %s: %+v", user, c)
		}
	}
	// The same certificate is not allowed as a peer's by an identifier whose allowed
	// names lack it, and is not a user's either.
	strict := &mvproxy.CertIdentifier{ClientCAs: clientCA.Pool(), RequestHeaderCAs: frontCA.Pool(), AllowedNames: []string{"other"}}
	for range 2 {
		if _, err := strict.Identify(requestWith(front, http.Header{"X-Remote-User": {"carol"}})); err == nil {
			t.Fatal("a front-proxy certificate with a name not allowed passed")
		}
	}
}

// A remembered chain is forgotten when its certificate expires, well before the minute
// a verified chain is kept at most.
func TestCertIdentifierForgetsAnExpiredCertificate(t *testing.T) {
	clientCA, frontCA := testpki.NewTestCA(t, "client-ca"), testpki.NewTestCA(t, "front-proxy-ca")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(2500 * time.Millisecond)
	path, err := clientCA.IssueFor("short", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "erin"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, key.Public(), expires)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cert := parseCert(t, certPEM)
	id := &mvproxy.CertIdentifier{ClientCAs: clientCA.Pool(), RequestHeaderCAs: frontCA.Pool()}
	if c := identify(t, id, requestWith(cert, nil)); c.User == nil || c.User.Name != "erin" {
		t.Fatalf("erin: %+v", c.User)
	}
	// x509 compares in whole seconds: wait until NotAfter (truncated) has surely passed.
	time.Sleep(time.Until(cert.NotAfter.Add(1100 * time.Millisecond)))
	if c, err := id.Identify(requestWith(cert, nil)); err == nil {
		t.Fatalf("erin's expired certificate still identifies her: %+v", c.User)
	}
}
