package pemkey

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(ec)
	edPKCS8, _ := x509.MarshalPKCS8PrivateKey(ed)
	sec1, _ := x509.MarshalECPrivateKey(ec)
	for _, tc := range []struct {
		name string
		in   []byte
		err  string
	}{
		{"PKCS#8 after a certificate", append(block("CERTIFICATE", []byte("x")), block("PRIVATE KEY", pkcs8)...), ""},
		{"Ed25519 PKCS#8", block("PRIVATE KEY", edPKCS8), ""},
		{"SEC 1", block("EC PRIVATE KEY", sec1), ""},
		{"encrypted", block("ENCRYPTED PRIVATE KEY", []byte("x")), "the key is encrypted; kplug reads unencrypted PEM keys (keep it 0600) or keys on a PKCS#11 token"},
		{"no key", block("CERTIFICATE", []byte("x")), "no PEM private key in it"},
	} {
		key, err := Parse(tc.in)
		switch {
		case tc.err == "" && (err != nil || key == nil):
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.err)
		}
	}
	if _, err := Parse(block("PRIVATE KEY", []byte("garbage"))); err == nil {
		t.Error("a garbled key parsed")
	}
}
