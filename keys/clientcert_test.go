package keys_test

import (
	"bufio"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/keys"
)

func newClientCert(t testing.TB, certFile, keyURI string, n *atomic.Int64) *keys.ClientCertificate {
	t.Helper()
	ks, err := keys.Open(keyURI, keys.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n != nil {
		ks = counting{ks, n}
	}
	cc, err := keys.NewClientCertificate(keys.ClientCertOptions{CertFile: certFile, Key: ks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// TestResumedSessionsNeedNoSignature: the key signs during the first handshake only; later
// connections resume the TLS session. RSA over TLS 1.3 signs with PSS.
func TestResumedSessionsNeedNoSignature(t *testing.T) {
	ca := testpki.NewTestCA(t, "test client CA")
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		key     crypto.Signer
		version uint16
	}{
		{"ECDSA P-256, TLS 1.3", ecKey, tls.VersionTLS13},
		{"RSA-PSS, TLS 1.3", rsaKey, tls.VersionTLS13},
		{"ECDSA P-256, TLS 1.2", ecKey, tls.VersionTLS12},
		{"RSA, TLS 1.2", rsaKey, tls.VersionTLS12},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := mtlsServer(t, ca, tt.version, nil)
			certFile, keyFile := filePair(t, t.TempDir(), "alice", ca, "alice", tt.key)
			for _, resume := range []bool{false, true} {
				var signatures atomic.Int64
				c := mtlsClient(srv, newClientCert(t, certFile, "file:"+keyFile, &signatures), resume)
				var got []string
				for range 4 {
					got = append(got, getBody(t, c, srv.URL))
				}
				want := []string{"alice resumed=false", "alice resumed=false", "alice resumed=false", "alice resumed=false"}
				wantSignatures := int64(4)
				if resume {
					want = []string{"alice resumed=false", "alice resumed=true", "alice resumed=true", "alice resumed=true"}
					wantSignatures = 1
				}
				if strings.Join(got, ",") != strings.Join(want, ",") || signatures.Load() != wantSignatures {
					t.Errorf("resume=%v: four connections saw %q with %d signatures; want %q with %d", resume, got, signatures.Load(), want, wantSignatures)
				}
			}
		})
	}
}

// TestRotationWithoutRestart: once the certificate file is replaced, new connections use the
// new certificate (no resumed session carries the old identity over), and a stream opened
// before keeps flowing.
func TestRotationWithoutRestart(t *testing.T) {
	ca := testpki.NewTestCA(t, "test client CA")
	next := make(chan string)
	srv := mtlsServer(t, ca, 0, next)
	dir := t.TempDir()
	key1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	certFile, keyFile := filePair(t, dir, "client", ca, "alice-1", key1)
	cc := newClientCert(t, certFile, keyFile, nil)
	c := mtlsClient(srv, cc, true)
	if got := getBody(t, c, srv.URL); got != "alice-1 resumed=false" {
		t.Fatalf("before rotation: %q", got)
	}
	watchCtx, stopWatching := context.WithCancel(t.Context())
	rotated := cc.Watch(watchCtx, 10*time.Millisecond)
	defer func() {
		stopWatching()
		for range rotated { // until Watch has stopped
		}
	}()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/stream", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	stream := bufio.NewReader(resp.Body)
	if line, _ := stream.ReadString('\n'); line != "alice-1\n" {
		t.Fatalf("stream opened as %q", line)
	}

	// A new key and certificate; the key is written first, as a renewal would.
	key2, _ := rsa.GenerateKey(rand.Reader, 2048)
	writeFile(t, keyFile, keyPEM(t, key2))
	writeFile(t, certFile, issueNow(t, ca, "alice-2", key2.Public()))
	select {
	case <-rotated:
	case <-time.After(10 * time.Second):
		t.Error("Watch did not report the rotation")
	}
	for range 2 {
		if got := getBody(t, c, srv.URL); got != "alice-2 resumed=false" && got != "alice-2 resumed=true" {
			t.Errorf("after rotation: %q, want alice-2", got)
		}
	}
	if got := cc.Leaf().Subject.CommonName; got != "alice-2" {
		t.Errorf("Leaf: %q", got)
	}
	next <- "still open"
	if line, err := stream.ReadString('\n'); line != "still open\n" {
		t.Errorf("the stream opened before rotation: %q, %v", line, err)
	}
}

// TestUnusableReplacementKeepsCurrentCertificate: a replacement certificate without its key
// is not taken up; when the key arrives, it is.
func TestUnusableReplacementKeepsCurrentCertificate(t *testing.T) {
	ca := testpki.NewTestCA(t, "test client CA")
	srv := mtlsServer(t, ca, 0, nil)
	dir := t.TempDir()
	key1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	certFile, keyFile := filePair(t, dir, "client", ca, "alice-1", key1)
	now := time.Now()
	ks, err := keys.Open(keyFile, keys.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := keys.NewClientCertificate(keys.ClientCertOptions{CertFile: certFile, Key: ks, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	c := mtlsClient(srv, cc, false)
	key2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	writeFile(t, certFile, issueNow(t, ca, "alice-2", key2.Public())) // the key is not there yet
	if got := getBody(t, c, srv.URL); got != "alice-1 resumed=false" {
		t.Errorf("with the new certificate but the old key: %q, want alice-1", got)
	}
	writeFile(t, keyFile, keyPEM(t, key2))
	now = now.Add(2 * time.Second)
	if got := getBody(t, c, srv.URL); got != "alice-2 resumed=false" {
		t.Errorf("once the key arrived: %q, want alice-2", got)
	}
}

func TestClientCertificateBadInput(t *testing.T) {
	ca := testpki.NewTestCA(t, "test client CA")
	dir := t.TempDir()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	rsa1024, _ := rsa.GenerateKey(rand.Reader, 1024)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, b)
		return p
	}
	ecKey := write("ec.key", keyPEM(t, ec))
	for _, tt := range []struct {
		name, cert, key, want string
	}{
		{"expired", write("expired.crt", issue(t, ca, "alice", ec.Public(), time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))), ecKey,
			`certificate for "alice" expired at `},
		{"not yet valid", write("future.crt", issue(t, ca, "alice", ec.Public(), time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))), ecKey,
			`certificate for "alice" is not valid before `},
		{"key and certificate do not match", write("other.crt", issueNow(t, ca, "alice", other.Public())), ecKey,
			"does not match the certificate (the certificate is for a different ECDSA P-256 key)"},
		{"unsupported key type", write("p224.crt", issueNow(t, ca, "alice", p224.Public())), write("p224.key", keyPEM(t, p224)),
			"unsupported key type ECDSA P-224: want ECDSA P-256, P-384 or P-521, RSA of at least 2048 bits, or Ed25519"},
		{"short RSA key", write("rsa1024.crt", issueNow(t, ca, "alice", rsa1024.Public())), write("rsa1024.key", keyPEM(t, rsa1024)),
			"unsupported key type RSA 1024"},
		{"not a certificate", ecKey, ecKey, "no PEM certificate in it"},
		{"key file missing", write("ok.crt", issueNow(t, ca, "alice", ec.Public())), filepath.Join(dir, "missing.key"), "reading key: open "},
		{"encrypted key", write("ok2.crt", issueNow(t, ca, "alice", ec.Public())), write("enc.key", []byte("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n")),
			"the key is encrypted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ks, err := keys.Open(tt.key, keys.Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = keys.NewClientCertificate(keys.ClientCertOptions{CertFile: tt.cert, Key: ks})
			prefix := "client certificate " + tt.cert + ": "
			if err == nil || !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v\nwant %q then %q", err, prefix, tt.want)
			}
		})
	}
	if _, err := keys.NewClientCertificate(keys.ClientCertOptions{CertFile: filepath.Join(dir, "none.crt"), Key: nil}); err == nil {
		t.Error("no key: no error")
	}
	if _, err := keys.NewClientCertificate(keys.ClientCertOptions{CertFile: filepath.Join(dir, "none.crt"), Key: mustOpen(t, ecKey)}); err == nil || !strings.HasSuffix(err.Error(), "none.crt: no such file or directory") {
		t.Errorf("missing certificate: %v", err)
	}
}

func mustOpen(t *testing.T, uri string) keys.Source {
	t.Helper()
	ks, err := keys.Open(uri, keys.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func TestOpenKeySchemes(t *testing.T) {
	for uri, want := range map[string]string{
		"":                                       "no key given",
		"kms:alias/foo":                          `key URI "kms:alias/foo": unsupported scheme "kms": want a file path, file:PATH, a pkcs11: or a tpm: URI`,
		"pkcs11:object=a":                        `pkcs11: "pkcs11:object=a" names no token: add token=LABEL or serial=`,
		"pkcs11:token=t;pin=1":                   `pkcs11: unknown attribute "pin"`,
		"pkcs11:token=t?pin-value=1234;object=o": "pkcs11: pin-value is refused: keep the PIN out of the kubeconfig with pin-source=file:PATH or $KPLUG_PKCS11_PIN",
		"PKCS11:token=t;object=o?pin-value=1234": "pkcs11: pin-value is refused: keep the PIN out of the kubeconfig with pin-source=file:PATH or $KPLUG_PKCS11_PIN",
		"vault:transit/k?token=s3cret":           `key URI "vault:transit/k": unsupported scheme "vault": want a file path, file:PATH, a pkcs11: or a tpm: URI`,
	} {
		_, err := keys.Open(uri, keys.Options{})
		if err == nil || err.Error() != want {
			t.Errorf("Open(%q) = %v, want %q", uri, err, want)
		}
	}
	for _, path := range []string{`C:\keys\alice.pem`, "./a:b.pem", "/etc/kplug/alice.key", "file:/etc/kplug/alice.key", "FILE:/etc/kplug/alice.key"} {
		if _, err := keys.Open(path, keys.Options{}); err != nil {
			t.Errorf("Open(%q) = %v, want a key file", path, err)
		}
	}
}

// TestSessionsRightAfterRotationAreNotKept: a TLS 1.3 session ticket arrives after the
// handshake, so one put shortly after a rotation may belong to a connection made with the
// old certificate; it must not be resumed as the new identity.
func TestSessionsRightAfterRotationAreNotKept(t *testing.T) {
	ca := testpki.NewTestCA(t, "test client CA")
	dir := t.TempDir()
	key1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	certFile, keyFile := filePair(t, dir, "client", ca, "alice-1", key1)
	now := time.Now()
	cc, err := keys.NewClientCertificate(keys.ClientCertOptions{
		CertFile: certFile, Key: mustOpen(t, keyFile), Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cache := cc.ClientSessionCache()
	before, during, after := &tls.ClientSessionState{}, &tls.ClientSessionState{}, &tls.ClientSessionState{}
	cache.Put("api:443", before)
	if got, ok := cache.Get("api:443"); !ok || got != before {
		t.Fatal("a session before any rotation was not kept")
	}
	key2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	writeFile(t, keyFile, keyPEM(t, key2))
	writeFile(t, certFile, issueNow(t, ca, "alice-2", key2.Public()))
	if _, ok := cache.Get("api:443"); ok { // the next connection notices the rotation
		t.Error("a session of the old certificate is offered after the rotation")
	}
	now = now.Add(time.Second)
	cache.Put("api:443", during)
	if _, ok := cache.Get("api:443"); ok {
		t.Error("a session put a second after the rotation is kept; it may carry the old identity")
	}
	now = now.Add(time.Minute)
	cache.Put("api:443", after)
	if got, ok := cache.Get("api:443"); !ok || got != after {
		t.Error("a session put well after the rotation was not kept")
	}
}
