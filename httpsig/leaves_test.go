package httpsig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

// leafSigner is a signing key, a certificate for it from ca valid until notAfter, and a
// Signer whose clock is now.
func leafSigner(t *testing.T, ca *testpki.CA, cn string, now, notAfter time.Time) (*Signer, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path, err := ca.IssueForPeriod(cn, &x509.Certificate{Subject: pkix.Name{CommonName: cn}}, key.Public(), now.Add(-time.Hour), notAfter)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(SignerOptions{
		Key:     Key{Signer: key, Certificate: leaf},
		Headers: map[string]string{AudienceHeader: audience},
		Now:     func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, leaf
}

// verifyWithLeaves signs a request with s, lets change alter it, and verifies it with
// leaves at now, the certificate's own key vouched for.
func verifyWithLeaves(t *testing.T, s *Signer, leaves *LeafCache, now time.Time, change func(*http.Request)) (*Verified, error) {
	t.Helper()
	req := testRequest(http.MethodGet, "/api", "")
	if err := s.Sign(req); err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(req)
	}
	p := testPolicy()
	p.Now = func() time.Time { return now }
	return VerifyRequest(req, p, func(sig *Signature) (any, error) {
		if sig.Certificate == nil {
			return nil, errors.New("no certificate")
		}
		return sig.Certificate.PublicKey, nil
	}, VerifyOptions{Leaves: leaves})
}

// The leaf cache of issue 33 item 4: the same bytes give the leaf parsed before; other
// bytes (another certificate, or a re-issued one for the same key) never do, and a
// remembered certificate does not answer for a keyid that is not its digest.
func TestLeafCacheAnswersOnlyForTheSameBytes(t *testing.T) {
	t.Parallel()
	ca := testpki.NewTestCA(t, "leaf cache CA")
	now := time.Now()
	alice, aliceLeaf := leafSigner(t, ca, "alice", now, now.Add(time.Hour))
	bob, bobLeaf := leafSigner(t, ca, "bob", now, now.Add(time.Hour))
	leaves := NewLeafCache(0)

	first, err := verifyWithLeaves(t, alice, leaves, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := verifyWithLeaves(t, alice, leaves, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Signature.Certificate.Equal(aliceLeaf) || again.Signature.Certificate != first.Signature.Certificate {
		t.Errorf("the same bytes were parsed again, or gave another certificate")
	}
	other, err := verifyWithLeaves(t, bob, leaves, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !other.Signature.Certificate.Equal(bobLeaf) {
		t.Errorf("bob's request gave certificate %s", other.Signature.Certificate.Subject)
	}
	if leaves.Len() != 2 {
		t.Errorf("%d leaves remembered, want alice's and bob's", leaves.Len())
	}

	// Bob's certificate, remembered, in a request alice signed: not the keyid's digest,
	// refused as it is without a cache.
	_, err = verifyWithLeaves(t, alice, leaves, now, func(r *http.Request) {
		r.Header.Set(CertificateHeader, ":"+base64.StdEncoding.EncodeToString(bobLeaf.Raw)+":")
	})
	var e *Error
	if !errors.As(err, &e) || e.Outcome != UnknownKey || !strings.Contains(err.Error(), "is not the SHA-256 of the certificate in Signature-Certificate") {
		t.Errorf("a remembered certificate under another keyid: got %v, want unknown_key: digest mismatch", err)
	}

	// A certificate re-issued for alice's key: other bytes, so its own leaf.
	reissued, reissuedLeaf := leafSigner(t, ca, "alice-renewed", now, now.Add(2*time.Hour))
	got, err := verifyWithLeaves(t, reissued, leaves, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Signature.Certificate.Equal(reissuedLeaf) || got.Signature.Certificate.Subject.CommonName != "alice-renewed" {
		t.Errorf("the re-issued certificate gave %s", got.Signature.Certificate.Subject)
	}
}

// A LeafCache keeps at most its size, the least recently used going first, and no leaf
// past its NotAfter: an expired certificate is parsed each time and left to resolve to
// refuse, as without a cache.
func TestLeafCacheIsBoundedAndHoldsNoExpiredLeaf(t *testing.T) {
	t.Parallel()
	ca := testpki.NewTestCA(t, "leaf cache CA")
	now := time.Now()
	leaves := NewLeafCache(2)
	var signers []*Signer
	var seen []*x509.Certificate
	for _, cn := range []string{"a", "b", "c"} {
		s, _ := leafSigner(t, ca, cn, now, now.Add(time.Hour))
		v, err := verifyWithLeaves(t, s, leaves, now, nil)
		if err != nil {
			t.Fatal(err)
		}
		signers, seen = append(signers, s), append(seen, v.Signature.Certificate)
	}
	if leaves.Len() != 2 {
		t.Errorf("%d leaves remembered, bound 2", leaves.Len())
	}
	v, err := verifyWithLeaves(t, signers[0], leaves, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Signature.Certificate == seen[0] {
		t.Error("the least recently used leaf was still remembered")
	}
	if v, _ := verifyWithLeaves(t, signers[2], leaves, now, nil); v == nil || v.Signature.Certificate != seen[2] {
		t.Error("the most recently used leaf was forgotten")
	}

	// Past NotAfter: parsed, returned, not remembered.
	later := now.Add(2 * time.Hour)
	expired, expiredLeaf := leafSigner(t, ca, "expired", later, now.Add(time.Hour))
	leaves = NewLeafCache(2)
	for range 2 {
		v, err := verifyWithLeaves(t, expired, leaves, later, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !v.Signature.Certificate.Equal(expiredLeaf) {
			t.Errorf("expired leaf: got %s", v.Signature.Certificate.Subject)
		}
	}
	if leaves.Len() != 0 {
		t.Errorf("an expired leaf was remembered (%d entries)", leaves.Len())
	}
}

// VerifyRequest gives every member of Signature-Input from its one parse, the refused
// ones too, in order; ParseInputs gives the same.
func TestVerifyRequestInputs(t *testing.T) {
	t.Parallel()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	req := testRequest(http.MethodGet, "/api", "")
	if err := newTestSigner(t, key).Sign(req); err != nil {
		t.Fatal(err)
	}
	// A second, unverifiable signature before the good one, covering a field the good
	// one does not.
	req.Header.Set("X-Extra", "1")
	req.Header.Set("Signature-Input", `sig0=("@method" "x-extra" 7);created=1;keyid="other";alg="ed25519";tag="kubernetes";nonce="n", `+req.Header.Get("Signature-Input"))
	req.Header.Set("Signature", `sig0=:AAAA:, `+req.Header.Get("Signature"))
	v, err := VerifyRequest(req, testPolicy(), publicResolver(key.Public()), VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseInputs(req.Header)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Inputs) != 2 || v.Inputs[0].Label != "sig0" || strings.Join(v.Inputs[0].Components, " ") != "@method x-extra" || v.Inputs[1].Label != DefaultLabel {
		t.Fatalf("inputs %+v", v.Inputs)
	}
	if strings.Join(v.Inputs[1].Components, " ") != strings.Join(v.Signature.Components, " ") {
		t.Errorf("accepted signature's components %q, its input's %q", v.Signature.Components, v.Inputs[1].Components)
	}
	for i := range parsed {
		if parsed[i].Label != v.Inputs[i].Label || strings.Join(parsed[i].Components, " ") != strings.Join(v.Inputs[i].Components, " ") {
			t.Errorf("ParseInputs %+v, VerifyRequest %+v", parsed, v.Inputs)
		}
	}
	if in, err := ParseInputs(http.Header{}); in != nil || err != nil {
		t.Errorf("no Signature-Input: %v %v", in, err)
	}
	if _, err := ParseInputs(http.Header{"Signature-Input": {"sig1=("}}); err == nil || !strings.HasPrefix(err.Error(), "httpsig: Signature-Input is not a structured field dictionary: ") {
		t.Errorf("unparsable Signature-Input: %v", err)
	}
}
