package execcred

import (
	"testing"
)

// FuzzDecodeOutput checks that no plugin output panics the decoder, that an accepted
// output always carries a token or a parsed certificate, and that decoding is stable.
func FuzzDecodeOutput(f *testing.F) {
	for _, seed := range []string{
		`{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok"}}`,
		"apiVersion: client.authentication.k8s.io/v1\nstatus:\n  token: t\n  expirationTimestamp: 2030-01-01T00:00:00Z\n",
		`{"apiVersion":"client.authentication.k8s.io/v1","status":{"clientCertificateData":"x","clientKeyData":"y"}}`,
		"\xef\xbb\xbf{}", `[]`, `{"apiVersion":1}`, "- a\n- b", `{"status":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		c, err := DecodeOutput(V1, out)
		if err != nil {
			return
		}
		if c.Token == "" && c.Certificate == nil {
			t.Fatalf("accepted %q without a token or certificate", out)
		}
		if c.Certificate != nil && c.Certificate.Leaf == nil {
			t.Fatalf("accepted a certificate without a parsed leaf: %q", out)
		}
		again, err := DecodeOutput(V1, out)
		if err != nil || again.Token != c.Token || !again.Expiry.Equal(c.Expiry) {
			t.Fatalf("decoding %q twice differed: %v", out, err)
		}
	})
}
