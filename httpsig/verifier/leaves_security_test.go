package verifier

import (
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

// TestSecurityAnonymousLeavesAreNotRemembered (issue 33 review 2, C1): the leaf cache of
// issue 33 remembered every certificate it parsed, before anything checked who issued
// it, so anonymous clients filled it (4,096 leaves of up to 12 KiB of DER each, and what
// Go parses out of them) with certificates of their own making. A leaf no configured
// CA issued, or one naming a configured CA it was not issued by, must leave nothing
// behind; a real signer's leaf is still remembered.
func TestSecurityAnonymousLeavesAreNotRemembered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := New(f.cfg, Options{Now: func() time.Time { return f.now }})
	srv := newAuthServer(t, a)
	const aud = "https://cluster.example"
	stranger := testpki.NewTestCA(t, "a CA of the attacker's")
	for i := range 3 {
		forged, key := forgedLeaf(t, f.ca1, f.now)
		if u, err := srv.send(t, key, forged, "", aud, f.now, "GET", "/api", "", nil); u != nil || outcomeOf(err) != InvalidCertificate {
			t.Fatalf("forged leaf #%d: user %v, error %v; want %s", i, u, err, InvalidCertificate)
		}
		other, key := leafFrom(t, stranger, "mallory", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
		if u, err := srv.send(t, key, other, "", aud, f.now, "GET", "/api", "", nil); u != nil || err == nil {
			t.Fatalf("leaf of another CA #%d: user %v, error %v; want a refusal", i, u, err)
		}
	}
	if n := a.leaves.Len(); n != 0 {
		t.Errorf("%d leaves of refused certificates remembered; want none", n)
	}
	leaf, key := leafFrom(t, f.ca1, "alice", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	if u, err := srv.send(t, key, leaf, "", aud, f.now, "GET", "/api", "", nil); err != nil || u.Username != "cert:alice" {
		t.Fatalf("alice: %v %v", u, err)
	}
	if n := a.leaves.Len(); n != 1 {
		t.Errorf("%d leaves remembered after alice's request; want hers", n)
	}
}
