package verifier

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// leafFrom issues a signing certificate from ca, valid from notBefore to notAfter.
func leafFrom(t *testing.T, ca *testpki.CA, cn string, orgs []string, notBefore, notAfter time.Time) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return leafFor(t, ca, cn, key, notBefore, notAfter, orgs...), key
}

// leafFor is leafFrom for a key the test already has.
func leafFor(t *testing.T, ca *testpki.CA, cn string, key *ecdsa.PrivateKey, notBefore, notAfter time.Time, orgs ...string) *x509.Certificate {
	t.Helper()
	u, _ := url.Parse("spiffe://example.org/" + cn)
	path, err := ca.IssueForPeriod(cn, &x509.Certificate{Subject: pkix.Name{CommonName: cn, Organization: orgs}, URIs: []*url.URL{u}}, key.Public(), notBefore, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	return parseCertFile(t, path)
}

func parseCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parsePEMCertificate(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type fixture struct {
	ca0, ca1 *testpki.CA
	cfg      *Config
	reg      *prometheus.Registry
	auth     *Authenticator
	now      time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{ca0: testpki.NewTestCA(t, "signing CA 0"), ca1: testpki.NewTestCA(t, "signing CA 1"), reg: prometheus.NewRegistry(), now: time.Now()}
	var err error
	if f.cfg, err = ParseConfig([]byte(configYAML(f.ca0, f.ca1)), "", nil); err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	f.auth = New(f.cfg, Options{Metrics: m, Now: func() time.Time { return f.now }})
	return f
}

func outcomeOf(err error) httpsig.Outcome {
	var r *refusal
	if errors.As(err, &r) {
		return r.outcome
	}
	var he *httpsig.Error
	if errors.As(err, &he) {
		return he.Outcome
	}
	return ""
}

func TestClaimSelectsTheAnchorsAuthenticator(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now()
	leaf1, _ := leafFrom(t, f.ca1, "alice", nil, now.Add(-time.Hour), now.Add(time.Hour))
	leaf0, _ := leafFrom(t, f.ca0, "bob", nil, now.Add(-time.Hour), now.Add(time.Hour))
	stranger, _ := leafFrom(t, testpki.NewTestCA(t, "nobody's CA"), "eve", nil, now.Add(-time.Hour), now.Add(time.Hour))
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	noAKI, err := parsePEMCertificate(selfSigned(t, key, false, "no aki", nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		sig       httpsig.Signature
		wantAuth  string
		want      httpsig.Outcome
		wantError string
	}{
		{"CA 1", httpsig.Signature{Certificate: leaf1, Created: now}, "a1", "", ""},
		{"CA 0", httpsig.Signature{Certificate: leaf0, Created: now}, "a0", "", ""},
		{"within maxAge plus skew", httpsig.Signature{Certificate: leaf0, Created: now.Add(-5 * time.Second)}, "a0", "", ""},
		{"older than maxAge plus skew", httpsig.Signature{Certificate: leaf0, Created: now.Add(-6 * time.Second)}, "a0", httpsig.Stale, `signature created 6s ago, more than authenticator "a0"'s maxAge 2s plus maxClockSkew 3s`},
		{"untrusted issuer", httpsig.Signature{Certificate: stranger, Created: now}, "", UnknownIssuer, `no authenticator trusts the issuer "CN=nobody's CA" of certificate "CN=eve"`},
		{"no authority key id", httpsig.Signature{Certificate: noAKI, Created: now}, "", NoAuthorityKeyID, `certificate "CN=no aki" has no authority key identifier`},
		{"not a certificate", httpsig.Signature{KeyID: "corp:key-1", Created: now}, "", NotCertificate, `keyid "corp:key-1" is not a certificate keyid (x509-sha256:...)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			auth, err := f.cfg.claim(&tc.sig, now)
			name := ""
			if auth != nil {
				name = auth.name
			}
			if name != tc.wantAuth || outcomeOf(err) != tc.want || (err == nil) != (tc.wantError == "") || err != nil && !strings.Contains(err.Error(), tc.wantError) {
				t.Errorf("claimed by %q, outcome %q, error %v; want %q, %q, %q", name, outcomeOf(err), err, tc.wantAuth, tc.want, tc.wantError)
			}
		})
	}
}

func TestIdentityMapsAndCaches(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaf, _ := leafFrom(t, f.ca1, "alice", []string{"developers", "ops"}, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	auth := f.cfg.byKeyID[string(leaf.AuthorityKeyId)]
	want := &authenticationv1.UserInfo{
		Username: "cert:alice", UID: leaf.SerialNumber.String(), Groups: leaf.Subject.Organization, // DER sorts them
		Extra: map[string]authenticationv1.ExtraValue{"example.com/uris": {"spiffe://example.org/alice"}},
	}
	for range 2 {
		got, err := f.auth.identity(auth, leaf, f.now)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("user (-want +got):\n%s", diff)
		}
	}
	if err := testutil.CollectAndCompare(f.reg, strings.NewReader(`
# HELP kplug_httpsig_certificate_validation_cache_lookups_total Lookups of validated certificates, by authenticator and result (hit, miss).
# TYPE kplug_httpsig_certificate_validation_cache_lookups_total counter
kplug_httpsig_certificate_validation_cache_lookups_total{authenticator="a1",result="hit"} 1
kplug_httpsig_certificate_validation_cache_lookups_total{authenticator="a1",result="miss"} 1
`), "kplug_httpsig_certificate_validation_cache_lookups_total"); err != nil {
		t.Error(err)
	}
	// Past the certificate's notAfter the cached answer is gone and the chain fails.
	if _, err := f.auth.identity(auth, leaf, f.now.Add(2*time.Hour)); outcomeOf(err) != InvalidCertificate {
		t.Errorf("expired certificate: %v", err)
	}
}

func TestIdentityRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := f.now
	other := testpki.NewTestCA(t, "signing CA 0") // same name as CA 0, other key
	forgedIssuer, _ := leafFrom(t, other, "mallory", nil, now.Add(-time.Hour), now.Add(time.Hour))
	for _, tc := range []struct {
		name    string
		leaf    func() *x509.Certificate
		want    httpsig.Outcome
		message string
	}{
		{"expired", func() *x509.Certificate {
			c, _ := leafFrom(t, f.ca0, "old", nil, now.Add(-2*time.Hour), now.Add(-time.Hour))
			return c
		}, InvalidCertificate, `certificate "CN=old": x509: certificate has expired`},
		{"lifetime rule", func() *x509.Certificate {
			c, _ := leafFrom(t, f.ca0, "long", nil, now.Add(-time.Hour), now.Add(72*time.Hour))
			return c
		}, CertificateRule, `authenticator "a0" refused certificate "CN=long": certificate lifetime must not exceed 48 hours`},
		{"reserved group", func() *x509.Certificate {
			c, _ := leafFrom(t, f.ca0, "anon", []string{"system:authenticated"}, now.Add(-time.Hour), now.Add(time.Hour))
			return c
		}, ReservedName, `mapped certificate "CN=anon,O=system:authenticated" to "system:authenticated", a name only the authentication machinery assigns`},
		{"user rule", func() *x509.Certificate {
			c, _ := leafFrom(t, f.ca0, "root", []string{"system:masters"}, now.Add(-time.Hour), now.Add(time.Hour))
			return c
		}, UserRule, `authenticator "a0" refused user "cert:root": this authenticator may not assert an identity under the system: prefix`},
		{"signed by another key under the anchor's name", func() *x509.Certificate {
			c := *forgedIssuer
			c.AuthorityKeyId = f.ca0.Cert.SubjectKeyId // selects a0; the chain must still fail
			return &c
		}, InvalidCertificate, `x509: certificate signed by unknown authority`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := f.auth.identity(f.cfg.authenticators[0], tc.leaf(), now)
			if outcomeOf(err) != tc.want || err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("outcome %q, error %v; want %q, %q", outcomeOf(err), err, tc.want, tc.message)
			}
		})
	}
}

func TestReservedNamesWhateverTheRules(t *testing.T) {
	t.Parallel()
	ca := testpki.NewTestCA(t, "signing CA")
	doc := strings.Replace(configYAML(ca), `'"cert:" + cert.subject.commonName'`, `cert.subject.commonName`, 1)
	doc = doc[:strings.Index(doc, "    userValidationRules:")] // no rule at all
	cfg, err := ParseConfig([]byte(doc), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	a := New(cfg, Options{})
	for _, name := range []string{"system:anonymous", "system:unauthenticated", "system:authenticated"} {
		leaf, _ := leafFrom(t, ca, name, nil, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		if _, err := a.identity(cfg.authenticators[0], leaf, time.Now()); outcomeOf(err) != ReservedName {
			t.Errorf("%s: %v", name, err)
		}
	}
	leaf, _ := leafFrom(t, ca, "system:masters-ok-here", nil, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if _, err := a.identity(cfg.authenticators[0], leaf, time.Now()); err != nil {
		t.Errorf("a system: name no rule refuses: %v", err)
	}
}

// The memory of validated certificates is bounded by Options.CacheSize, and an entry
// answers only for the authenticator that validated the certificate.
func TestCertCacheIsBoundedAndPerAuthenticator(t *testing.T) {
	t.Parallel()
	a := New(&Config{}, Options{CacheSize: 2})
	now := time.Now()
	u := &authenticationv1.UserInfo{Username: "u"}
	d := func(b byte) cacheKey { return cacheKey{digest: [32]byte{b}, authenticator: "a"} }
	a.cache.Put(d(1), u, now.Add(time.Hour))
	a.cache.Put(d(2), u, now.Add(time.Hour))
	a.cache.Put(d(3), u, now.Add(time.Hour))
	if a.cache.Len() != 2 {
		t.Errorf("%d entries, bound 2", a.cache.Len())
	}
	if _, ok := a.cache.Get(cacheKey{digest: [32]byte{3}, authenticator: "b"}, now); ok {
		t.Error("an entry answered for another authenticator")
	}
}

func TestRefusedCountsBoundedLabels(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_ = f.auth.refused(&httpsig.Error{Outcome: httpsig.Malformed, Err: errors.New("x")}, "", nil)
	// httpsig keeps only the message of resolve's error; the refusal itself is passed.
	_ = f.auth.refused(&httpsig.Error{Outcome: httpsig.UnknownKey, Err: errors.New("y")}, "", &refusal{outcome: UnknownIssuer, err: errors.New("y")})
	_ = f.auth.refused(&httpsig.Error{Outcome: httpsig.Forged, Err: errors.New("z")}, "a0", nil)
	err := f.auth.refused(&refusal{authenticator: "a1", outcome: UserRule, err: errors.New("no")}, "", nil)
	var he *httpsig.Error
	if !errors.As(err, &he) || he.Outcome != UserRule || he.Error() != "no" {
		t.Errorf("refused returned %#v", err)
	}
	if err := testutil.CollectAndCompare(f.reg, strings.NewReader(`
# HELP kplug_httpsig_signature_outcomes_total Signatures an authenticator claimed, by authenticator and outcome (accepted, forged, stale, required, certificate or user rule refused, ...).
# TYPE kplug_httpsig_signature_outcomes_total counter
kplug_httpsig_signature_outcomes_total{authenticator="a0",outcome="forged"} 1
kplug_httpsig_signature_outcomes_total{authenticator="a1",outcome="user_rule"} 1
# HELP kplug_httpsig_unclaimed_signatures_total Signed requests no authenticator claimed, by reason.
# TYPE kplug_httpsig_unclaimed_signatures_total counter
kplug_httpsig_unclaimed_signatures_total{reason="malformed"} 1
kplug_httpsig_unclaimed_signatures_total{reason="unknown_issuer"} 1
`), "kplug_httpsig_signature_outcomes_total", "kplug_httpsig_unclaimed_signatures_total"); err != nil {
		t.Error(err)
	}
}
