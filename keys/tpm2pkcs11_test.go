//go:build cgo && linux

package keys_test

import (
	"crypto"
	"crypto/rsa"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/internal/testkit/tpm2pkcs11"
	"github.com/kplug/kplug/keys"
)

// TestTPM2PKCS11 uses keys made in a TPM with tpm2_ptool through kplug's PKCS#11 path and
// the tpm2-pkcs11 module: the second way to a TPM, for cgo builds whose keys already live
// in a tpm2-pkcs11 store. One pass over what the SoftHSM2 tests cover in depth: the key
// signs in the TPM, for KEP-6308 and for TLS client authentication.
func TestTPM2PKCS11(t *testing.T) {
	tok, pinFile := tpm2pkcs11.NewTestToken(t, "kplug-tpm")
	pubs := map[string]crypto.PublicKey{}
	for label, alg := range map[string]string{"alice-ec": "ecc256", "alice-rsa": "rsa2048"} {
		pub, err := tok.AddKey(label, alg)
		if err != nil {
			t.Fatal(err)
		}
		pubs[label] = pub
	}

	// Before any session is logged in, as in TestPKCS11ClientKeys.
	t.Run("wrong PIN", func(t *testing.T) {
		wrongPIN := filepath.Join(t.TempDir(), "wrong-pin")
		writeFile(t, wrongPIN, []byte("0000\n"))
		ks, err := keys.Open(tok.URI("alice-ec", wrongPIN), keys.Options{})
		if err == nil {
			_ = ks.Close()
		}
		if want := `pkcs11: token "kplug-tpm" refused the PIN`; err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), tok.PIN) {
			t.Errorf("err = %v, want %q without the PIN", err, want)
		}
	})

	pss := &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.SHA256}
	for _, tt := range []struct {
		name, label string
		opts        crypto.SignerOpts
	}{
		{"ECDSA P-256", "alice-ec", crypto.SHA256},
		{"RSA-PSS", "alice-rsa", pss},
		{"RSA PKCS#1 v1.5", "alice-rsa", crypto.SHA256},
	} {
		t.Run(tt.name+" signs in the TPM", func(t *testing.T) {
			key, closer, err := keys.OpenSigner(tok.URI(tt.label, pinFile), keys.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer closer.Close()
			if !publicKeyEqual(key.Public(), pubs[tt.label]) {
				t.Fatalf("OpenSigner returned another key than tpm2_ptool made")
			}
			signAndVerify(t, key, tt.opts)
		})
	}

	t.Run("TLS client key", func(t *testing.T) {
		ca := testpki.NewTestCA(t, "tpm2-pkcs11 client CA")
		certFile := filepath.Join(t.TempDir(), "alice.crt")
		writeFile(t, certFile, issueNow(t, ca, "alice-tpm", pubs["alice-ec"]))
		srv := mtlsServer(t, ca, 0, nil)
		var signatures atomic.Int64
		c := mtlsClient(srv, newClientCert(t, certFile, tok.URI("alice-ec", pinFile), &signatures), true)
		if got := getBody(t, c, srv.URL); got != "alice-tpm resumed=false" || signatures.Load() != 1 {
			t.Errorf("server saw %q after %d signatures in the TPM, want alice-tpm in a full handshake after 1", got, signatures.Load())
		}
	})
}
