//go:build cgo

package keys_test

import (
	"crypto"
	"encoding/pem"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/httpsigtest"
	"github.com/kplug/kplug/internal/testkit/softhsm"
	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/keys"
)

func generate(t *testing.T, tok *softhsm.Token, kind, label string) crypto.PublicKey {
	t.Helper()
	pub, err := tok.Generate(kind, label)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// TestPKCS11ClientKeys authenticates TLS connections with keys generated on a SoftHSM2
// token: they sign on the token, RSA with PSS under TLS 1.3, once per full handshake.
func TestPKCS11ClientKeys(t *testing.T) {
	tok, pinFile := softhsm.NewTestToken(t, "kplug-test")
	ca := testpki.NewTestCA(t, "test client CA")
	dir := t.TempDir()
	ecPub := generate(t, tok, "ecdsa-p256", "alice-ec")
	rsaPub := generate(t, tok, "rsa-2048", "alice-rsa")
	p224Pub := generate(t, tok, "ecdsa-p224", "alice-p224")
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, b)
		return p
	}
	ecCert := write("ec.crt", issueNow(t, ca, "alice-ec", ecPub))
	rsaCert := write("rsa.crt", issueNow(t, ca, "alice-rsa", rsaPub))

	// Before any session is logged in: PKCS#11 logins are per application, so a wrong PIN
	// is only noticed by the first.
	t.Run("bad input", func(t *testing.T) {
		wrongPIN := write("wrong-pin", []byte("0000\n"))
		for _, tt := range []struct {
			name, cert, uri, want string
			opts                  keys.Options
		}{
			{"wrong PIN", ecCert, tok.URI("alice-ec", wrongPIN), `pkcs11: token "kplug-test" refused the PIN: pkcs11: 0xA0: CKR_PIN_INCORRECT`, keys.Options{}},
			{"no PIN", ecCert, tok.URI("alice-ec", ""), `pkcs11: no PIN for token "kplug-test": add pin-source=file:PATH to the URI or set KPLUG_PKCS11_PIN`, keys.Options{}},
			{"missing token", ecCert, strings.Replace(tok.URI("alice-ec", pinFile), "token=kplug-test", "token=nope", 1),
				`pkcs11: no token "nope" in module ` + tok.Module, keys.Options{}},
			{"missing object", ecCert, tok.URI("nope", pinFile), `pkcs11: no private key object "nope" on token "kplug-test"`, keys.Options{}},
			{"missing module", ecCert, "pkcs11:token=kplug-test;object=alice-ec", "pkcs11: no module: add module-path=/path/to/module.so to the URI or set KPLUG_PKCS11_MODULE", keys.Options{PIN: tok.PIN}},
			{"key and certificate do not match", rsaCert, tok.URI("alice-ec", pinFile),
				`pkcs11: key object "alice-ec" on token "kplug-test" does not match the certificate (the certificate is for a different RSA 2048 key)`, keys.Options{}},
			{"unsupported key type", write("p224.crt", issueNow(t, ca, "alice-p224", p224Pub)), tok.URI("alice-p224", pinFile),
				"unsupported key type ECDSA P-224", keys.Options{}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				ks, err := keys.Open(tt.uri, tt.opts)
				if err == nil {
					_, err = keys.NewClientCertificate(keys.ClientCertOptions{CertFile: tt.cert, Key: ks})
					_ = ks.Close()
				}
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("err = %v, want %q", err, tt.want)
				}
				if err != nil && strings.Contains(err.Error(), "4711") {
					t.Errorf("the error shows the PIN: %v", err)
				}
			})
		}
	})

	t.Run("PIN from Options", func(t *testing.T) {
		ks, err := keys.Open("pkcs11:token=kplug-test;object=alice-ec", keys.Options{PIN: tok.PIN, PKCS11Module: tok.Module})
		if err != nil {
			t.Fatal(err)
		}
		_ = ks.Close()
	})

	for _, tt := range []struct{ name, cert, object string }{
		{"ECDSA P-256", ecCert, "alice-ec"},
		{"RSA-PSS", rsaCert, "alice-rsa"},
	} {
		t.Run(tt.name+" over TLS 1.3", func(t *testing.T) {
			srv := mtlsServer(t, ca, 0, nil)
			var signatures atomic.Int64
			c := mtlsClient(srv, newClientCert(t, tt.cert, tok.URI(tt.object, pinFile), &signatures), true)
			var got []string
			for range 3 {
				got = append(got, getBody(t, c, srv.URL))
			}
			want := tt.object + " resumed=false," + tt.object + " resumed=true," + tt.object + " resumed=true"
			if strings.Join(got, ",") != want || signatures.Load() != 1 {
				t.Errorf("three connections: %q with %d signatures on the token, want %q with 1", got, signatures.Load(), want)
			}
		})
	}

	t.Run("KEP-6308 signatures made on the token", func(t *testing.T) {
		key, closer, err := keys.OpenSigner(tok.URI("alice-ec", pinFile), keys.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer closer.Close()
		if !publicKeyEqual(key.Public(), ecPub) {
			t.Fatal("OpenSigner returned another key")
		}
		signer, err := httpsig.NewSigner(httpsig.SignerOptions{Key: httpsig.Key{Signer: key, KeyID: "alice-ec"}, Headers: map[string]string{httpsig.AudienceHeader: "https://cluster.example"}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httpsigtest.New(t, "https://cluster.example", map[string]any{"alice-ec": ecPub})
		c := &http.Client{Transport: signer.RoundTripper(http.DefaultTransport)}
		if got, err := send(t, c, "POST", srv.URL+"/api/v1/namespaces/default/configmaps", `{"kind":"ConfigMap"}`, http.Header{"Impersonate-User": {"bob"}}); err != nil || got != "alice-ec" {
			t.Errorf("verifier: %q, %v %+v", got, err, srv.Requests())
		}
	})

	t.Run("certificate on the token, rotated there", func(t *testing.T) {
		srv := mtlsServer(t, ca, 0, nil)
		store := func(cn string, pub crypto.PublicKey) {
			block, _ := pem.Decode(issueNow(t, ca, cn, pub))
			if err := tok.StoreCertificate("alice-rsa", block.Bytes); err != nil {
				t.Fatal(err)
			}
		}
		store("alice-on-token", rsaPub)
		ks, err := keys.Open(tok.URI("alice-rsa", pinFile), keys.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := keys.NewClientCertificate(keys.ClientCertOptions{Key: ks})
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		c := mtlsClient(srv, cc, true)
		if got := getBody(t, c, srv.URL); got != "alice-on-token resumed=false" {
			t.Fatalf("certificate from the token: %q", got)
		}
		store("alice-on-token-2", rsaPub)
		if got := getBody(t, c, srv.URL); got != "alice-on-token-2 resumed=false" {
			t.Errorf("after the token's certificate changed: %q, want alice-on-token-2 in a full handshake", got)
		}
		noCert, err := keys.Open(tok.URI("alice-ec", pinFile), keys.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = keys.NewClientCertificate(keys.ClientCertOptions{Key: noCert})
		_ = noCert.Close()
		if want := `pkcs11: no certificate object "alice-ec" on token "kplug-test"`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no certificate on the token: %v, want %q", err, want)
		}
	})

	t.Run("rotation to a new key on the token", func(t *testing.T) {
		srv := mtlsServer(t, ca, 0, nil)
		certFile := write("rotating.crt", issueNow(t, ca, "alice-ec", ecPub))
		cc := newClientCert(t, certFile, tok.URI("alice-ec", pinFile), nil)
		c := mtlsClient(srv, cc, true)
		if got := getBody(t, c, srv.URL); got != "alice-ec resumed=false" {
			t.Fatalf("before: %q", got)
		}
		// A second key under the same label, and a certificate for it.
		newPub := generate(t, tok, "ecdsa-p256", "alice-ec")
		writeFile(t, certFile, issueNow(t, ca, "alice-ec-2", newPub))
		if got := getBody(t, c, srv.URL); got != "alice-ec-2 resumed=false" {
			t.Errorf("after rotation: %q, want alice-ec-2 in a full handshake", got)
		}
	})
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}
