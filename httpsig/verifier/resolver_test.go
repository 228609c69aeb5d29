package verifier

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/httpsig/resolverapi"
	"github.com/kplug/kplug/internal/noncestore"
	"github.com/kplug/kplug/internal/sigresolver"
)

// The AWS documentation's example credentials.
const (
	exampleAKID   = "AKIDEXAMPLE"
	exampleSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
)

// countingResolver is kplug's reference resolver, counted, and able to hold ResolveKey
// calls until released.
type countingResolver struct {
	*sigresolver.Resolver
	resolves atomic.Int32
	hold     chan struct{} // when set, ResolveKey waits for it to close
	// answer, when set, rewrites the reference resolver's answer: another resolver's
	// behaviour.
	answer func(*resolverapi.ResolveKeyRequest, *resolverapi.ResolveKeyResponse, error) (*resolverapi.ResolveKeyResponse, error)
}

func (c *countingResolver) ResolveKey(ctx context.Context, req *resolverapi.ResolveKeyRequest) (*resolverapi.ResolveKeyResponse, error) {
	c.resolves.Add(1)
	if c.hold != nil {
		<-c.hold
	}
	resp, err := c.Resolver.ResolveKey(ctx, req)
	if c.answer != nil {
		return c.answer(req, resp, err)
	}
	return resp, err
}

// failingNonces is a nonce store that cannot be reached.
type failingNonces struct{}

func (failingNonces) Consume(context.Context, string, string, time.Time) (bool, string, error) {
	return false, "", errors.New("etcd: context deadline exceeded")
}

type resolverFixture struct {
	auth     *Authenticator
	resolver *countingResolver
	server   *grpc.Server
	metrics  *Metrics
	laptop   ed25519.PrivateKey
}

// newResolverFixture serves a key file over the resolver protocol from a socket in a
// private directory, and an Authenticator of a configuration with one resolver
// authenticator (extra is added to its resolver section).
func newResolverFixture(t *testing.T, nonces sigresolver.NonceStore, extra string) *resolverFixture {
	t.Helper()
	dir := t.TempDir()
	pub, laptop, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(pub)
	pubPEM := strings.ReplaceAll(string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), "\n", "\n    ")
	keys := `kind: SignatureResolverKeys
keyDerivation:
  kind: hmac-ladder
  hash: sha-256
  secretPrefix: AWS4
  steps:
  - {name: date, date: YYYYMMDD}
  - {name: region, scope: true}
  - {name: service, scope: true}
  - {name: terminator, literal: aws4_request}
keys:
- keyID: ` + exampleAKID + `
  algorithm: hmac-sha256
  secretBase64: d0phbHJYVXRuRkVNSS9LN01ERU5HK2JQeFJmaUNZRVhBTVBMRUtFWQ==
  derived: true
  stage: {scope: {region: us-east-1, service: sts}}
  user: {username: alice, groups: [dev]}
- keyID: AKIDSTAGED
  algorithm: hmac-sha256
  secretBase64: d0phbHJYVXRuRkVNSS9LN01ERU5HK2JQeFJmaUNZRVhBTVBMRUtFWQ==
  derived: true
  stage: {from: date, scope: {date: "20200101", region: us-east-1, service: sts}}
  user: {username: carol}
- keyID: corp/ci
  algorithm: hmac-sha256
  secretBase64: c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA==
  user: {username: ci-bot}
- keyID: corp/laptop
  algorithm: ed25519
  publicKey: |
    ` + pubPEM + `
  user: {username: bob}
- keyID: corp/admin
  algorithm: hmac-sha256
  secretBase64: c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA==
  user: {username: root-ish, groups: [ops]}
`
	keyFile := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keyFile, []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := sigresolver.New(keyFile, nonces, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &resolverFixture{resolver: &countingResolver{Resolver: r}, laptop: laptop}
	sock := filepath.Join(dir, "resolver.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f.server = grpc.NewServer()
	resolverapi.Register(f.server, f.resolver)
	go func() { _ = f.server.Serve(l) }()
	t.Cleanup(f.server.Stop)
	cfg, err := ParseConfig([]byte(`apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
httpSignature:
  requiredSignedHeaders:
    X-K8s-Audience: [https://cluster.example]
  authenticators:
  - name: keys
    resolver:
      endpoint: unix://`+sock+`
      relayedHeaders: [X-Session-Token]
`+extra+`
    userValidationRules:
    - expression: "!user.groups.exists(g, g == 'ops')"
      message: ops may not sign
`), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.metrics, err = NewMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	f.auth = New(cfg, Options{Metrics: f.metrics})
	t.Cleanup(func() { _ = f.auth.Close() })
	if err := f.auth.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	return f
}

// signed is a GET signed with k at created.
func signed(t *testing.T, k httpsig.Key, created time.Time) *http.Request {
	t.Helper()
	s, err := httpsig.NewSigner(httpsig.SignerOptions{Key: k, Headers: map[string]string{httpsig.AudienceHeader: "https://cluster.example"}, Now: func() time.Time { return created }})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://proxy.example/api/v1/namespaces/default/pods", nil)
	req.Header.Set("User-Agent", "kubectl/v1.35.0")
	if err := s.Sign(req); err != nil {
		t.Fatal(err)
	}
	return req
}

func sigV4Key(name, region string, secret []byte) httpsig.Key {
	return httpsig.Key{Secret: secret, Derivation: &httpsig.Derivation{Ladder: httpsig.SigV4Ladder(), Name: name, Scope: map[string]string{"region": region, "service": "sts"}}}
}

func TestResolverAuthenticates(t *testing.T) {
	f := newResolverFixture(t, noncestore.NewMemory(100, nil), "")
	now := time.Now()
	aws := sigV4Key(exampleAKID, "us-east-1", []byte(exampleSecret))
	for i := range 3 {
		u, err := f.auth.Authenticate(signed(t, aws, now))
		if err != nil || u.Username != "alice" || len(u.Groups) != 1 || u.Groups[0] != "dev" {
			t.Fatalf("request %d with the AWS-derived key: %v, %v", i, u, err)
		}
	}
	if n := f.resolver.resolves.Load(); n != 1 {
		t.Errorf("three requests under one key ID asked the resolver %d times, want 1 (the cache)", n)
	}
	if u, err := f.auth.Authenticate(signed(t, httpsig.Key{Secret: []byte("secret-secret-secret-secret-secret"), KeyID: "corp/ci"}, now)); err != nil || u.Username != "ci-bot" {
		t.Errorf("a plain secret: %v, %v", u, err)
	}
	if u, err := f.auth.Authenticate(signed(t, httpsig.Key{Signer: f.laptop, KeyID: "corp/laptop"}, now)); err != nil || u.Username != "bob" {
		t.Errorf("an Ed25519 public key: %v, %v", u, err)
	}
	if got := testutil.ToFloat64(f.metrics.keyCache.WithLabelValues("keys", "hit")); got != 2 {
		t.Errorf("key cache hits = %v, want 2", got)
	}
	if got := testutil.ToFloat64(f.metrics.calls.WithLabelValues("keys", "ConsumeNonce", "OK")); got != 5 {
		t.Errorf("ConsumeNonce calls = %v, want 5", got)
	}
	if got := testutil.ToFloat64(f.metrics.nonces.WithLabelValues("keys")); got != 1 {
		t.Errorf("nonce tracking = %v, want 1", got)
	}
}

func TestResolverRefuses(t *testing.T) {
	f := newResolverFixture(t, noncestore.NewMemory(100, nil), "")
	now := time.Now()
	secret := []byte(exampleSecret)
	aws := sigV4Key(exampleAKID, "us-east-1", secret)
	replayed := signed(t, aws, now)
	if _, err := f.auth.Authenticate(replayed); err != nil {
		t.Fatal(err)
	}
	ladder := httpsig.SigV4Ladder()
	oldKey, oldKeyID, err := ladder.Derive(exampleAKID, secret, now.AddDate(0, 0, -3), map[string]string{"region": "us-east-1", "service": "sts"})
	if err != nil {
		t.Fatal(err)
	}
	// One request signed by two keys (issue 31 review, F4): only one nonce could be
	// recorded, so the request with the other signature removed would pass again.
	twice := signed(t, httpsig.Key{Secret: []byte("secret-secret-secret-secret-secret"), KeyID: "corp/ci"}, now)
	second := twice.Clone(t.Context())
	other, err := httpsig.NewSigner(httpsig.SignerOptions{Key: httpsig.Key{Signer: f.laptop, KeyID: "corp/laptop"}, Label: "sig2",
		Headers: map[string]string{httpsig.AudienceHeader: "https://cluster.example"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Sign(second); err != nil {
		t.Fatal(err)
	}
	twice.Header.Add("Signature-Input", second.Header.Get("Signature-Input"))
	twice.Header.Add("Signature", second.Header.Get("Signature"))
	uncovered := signed(t, httpsig.Key{Secret: []byte("secret-secret-secret-secret-secret"), KeyID: "corp/ci"}, now)
	uncovered.Header.Set("X-Session-Token", "chosen by someone on the way")
	for _, tc := range []struct {
		name string
		req  *http.Request
		want httpsig.Outcome
		says string
	}{
		{"replayed", replayed, Replayed, "already used"},
		{"signed twice", twice, httpsig.Malformed, "carries 2 signatures, of which only one could be recorded"},
		{"another region's key ID", signed(t, sigV4Key(exampleAKID, "eu-west-1", secret), now), httpsig.UnknownKey, "not the signature's key ID"},
		{"a key derived for another date", signed(t, httpsig.Key{Secret: oldKey, KeyID: oldKeyID}, now), httpsig.UnknownKey, "not the signature's key ID"},
		{"a stage for another date", signed(t, sigV4Key("AKIDSTAGED", "us-east-1", secret), now), httpsig.UnknownKey, `was derived for "20200101" (step "date"), and the signature was created on`},
		{"a wrong secret", signed(t, sigV4Key(exampleAKID, "us-east-1", []byte("not the secret")), now), httpsig.Forged, "does not verify"},
		{"an expired created", signed(t, aws, now.Add(-2*time.Minute)), httpsig.Stale, "created"},
		{"an unknown key ID", signed(t, httpsig.Key{Secret: []byte("secret-secret-secret-secret-secret"), KeyID: "corp/nobody"}, now), httpsig.UnknownKey, "no resolver serves"},
		{"another key's algorithm", signed(t, httpsig.Key{Secret: []byte("secret-secret-secret-secret-secret"), KeyID: "corp/laptop"}, now), httpsig.UnknownKey, `not the key's algorithm "ed25519"`},
		{"an uncovered relayed header", uncovered, httpsig.Uncovered, "X-Session-Token is not covered"},
		{"a user the rules refuse", signed(t, httpsig.Key{Secret: []byte("secret-secret-secret-secret-secret"), KeyID: "corp/admin"}, now), UserRule, "ops may not sign"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.resolver.resolves.Load()
			u, err := f.auth.Authenticate(tc.req)
			if u != nil || outcomeOf(err) != tc.want || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("user %v, error %v (%s); want outcome %s saying %q", u, err, outcomeOf(err), tc.want, tc.says)
			}
			if tc.want == httpsig.Stale || tc.want == httpsig.Uncovered {
				if n := f.resolver.resolves.Load(); n != before {
					t.Errorf("the resolver was asked about a signature refused before the lookup")
				}
			}
		})
	}
	// A key ID the resolver does not serve is remembered for negativeMaxAge.
	before := f.resolver.resolves.Load()
	if _, err := f.auth.Authenticate(signed(t, httpsig.Key{Secret: []byte("secret-secret-secret-secret-secret"), KeyID: "corp/nobody"}, now)); outcomeOf(err) != httpsig.UnknownKey {
		t.Fatal(err)
	}
	if n := f.resolver.resolves.Load(); n != before {
		t.Errorf("a key ID just found unknown was asked about again")
	}
}

func TestResolverOutagesFailClosed(t *testing.T) {
	now := time.Now()
	ci := httpsig.Key{Secret: []byte("secret-secret-secret-secret-secret"), KeyID: "corp/ci"}
	t.Run("nonce store unreachable", func(t *testing.T) {
		f := newResolverFixture(t, failingNonces{}, "")
		u, err := f.auth.Authenticate(signed(t, ci, now))
		if u != nil || outcomeOf(err) != ResolverUnavailable || !strings.Contains(err.Error(), "nonce could not be recorded (Unavailable)") {
			t.Errorf("user %v, error %v (%s)", u, err, outcomeOf(err))
		}
	})
	t.Run("nonce store full", func(t *testing.T) {
		// A full store cannot record the nonce: an outage, not a replay of a signature
		// that was never used.
		f := newResolverFixture(t, noncestore.NewMemory(1, nil), "")
		if _, err := f.auth.Authenticate(signed(t, ci, now)); err != nil {
			t.Fatal(err)
		}
		u, err := f.auth.Authenticate(signed(t, ci, now))
		if u != nil || outcomeOf(err) != ResolverUnavailable || !strings.Contains(err.Error(), "nonce could not be recorded") {
			t.Errorf("user %v, error %v (%s)", u, err, outcomeOf(err))
		}
	})
	t.Run("resolver gone", func(t *testing.T) {
		f := newResolverFixture(t, noncestore.NewMemory(10, nil), "")
		f.server.Stop()
		u, err := f.auth.Authenticate(signed(t, ci, now))
		if u != nil || outcomeOf(err) != ResolverUnavailable || !strings.Contains(err.Error(), "resolver is unavailable (Unavailable)") {
			t.Errorf("user %v, error %v (%s)", u, err, outcomeOf(err))
		}
	})
	t.Run("nonces ignored", func(t *testing.T) {
		f := newResolverFixture(t, nil, "      nonceHandling: Ignore\n")
		req := signed(t, ci, now)
		for i := range 2 {
			if _, err := f.auth.Authenticate(req); err != nil {
				t.Errorf("request %d: %v (nonceHandling Ignore accepts a replay, as documented)", i, err)
			}
		}
		if got := testutil.ToFloat64(f.metrics.nonces.WithLabelValues("keys")); got != 0 {
			t.Errorf("nonce tracking = %v, want 0", got)
		}
	})
}

// TestResolverOneLookupInFlight sends concurrent requests under one key ID the cache does
// not hold: the resolver is asked once.
func TestResolverOneLookupInFlight(t *testing.T) {
	f := newResolverFixture(t, noncestore.NewMemory(100, nil), "")
	f.resolver.hold = make(chan struct{})
	ci := httpsig.Key{Secret: []byte("secret-secret-secret-secret-secret"), KeyID: "corp/ci"}
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	created := time.Now()
	key := resolverCacheKey(&httpsig.Signature{KeyID: "corp/ci", Algorithm: "hmac-sha256", Created: created}, nil, nil)
	for range n {
		req := signed(t, ci, created)
		wg.Go(func() {
			_, err := f.auth.Authenticate(req)
			errs <- err
		})
	}
	// Wait until every request is waiting on the lookup in flight, then let it answer.
	for deadline := time.Now().Add(time.Minute); f.auth.resolvers["keys"].lookups.Waiters(key) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(f.resolver.hold)
			t.Fatalf("%d requests wait for the lookup, want %d", f.auth.resolvers["keys"].lookups.Waiters(key), n)
		}
	}
	close(f.resolver.hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := f.resolver.resolves.Load(); got != 1 {
		t.Errorf("%d concurrent requests asked the resolver %d times, want 1", n, got)
	}
}

// TestResolverSocketDirectoryMustBePrivate: whoever can put a socket in the resolver's
// directory answers for the cluster.
func TestResolverSocketDirectoryMustBePrivate(t *testing.T) {
	f := newResolverFixture(t, noncestore.NewMemory(10, nil), "")
	dir := filepath.Dir(f.auth.resolvers["keys"].cfg.socket)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	auth := New(f.auth.cfg, Options{})
	defer auth.Close()
	err := auth.Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), "other users can write to it") {
		t.Errorf("Check with a world-writable socket directory: %v", err)
	}
}

// TestResolverCacheKeyedByWhatClientsChoose: an unauthenticated client chooses the
// algorithm and created time a lookup sends, and a resolver may answer by them. What it is
// told for one must not be served to a request that says another, or anyone could spoil
// a key ID for its owner for as long as the answer is cached.
func TestResolverCacheKeyedByWhatClientsChoose(t *testing.T) {
	ci := httpsig.Key{Secret: []byte("secret-secret-secret-secret-secret"), KeyID: "corp/ci"}
	t.Run("algorithm", func(t *testing.T) {
		f := newResolverFixture(t, noncestore.NewMemory(100, nil), "")
		// A resolver that serves a key ID only under its algorithm.
		f.resolver.answer = func(req *resolverapi.ResolveKeyRequest, resp *resolverapi.ResolveKeyResponse, err error) (*resolverapi.ResolveKeyResponse, error) {
			if err == nil && resp.GetAlgorithm() != req.GetAlgorithm() {
				return nil, status.Error(codes.NotFound, "no key of that algorithm")
			}
			return resp, err
		}
		now := time.Now()
		if _, err := f.auth.Authenticate(signed(t, httpsig.Key{Signer: f.laptop, KeyID: "corp/ci"}, now)); outcomeOf(err) != httpsig.UnknownKey {
			t.Fatalf("corp/ci under ed25519: %v", err)
		}
		if u, err := f.auth.Authenticate(signed(t, ci, now)); err != nil || u.Username != "ci-bot" {
			t.Errorf("corp/ci's owner, after someone asked under another algorithm: %v, %v", u, err)
		}
	})
	t.Run("created date", func(t *testing.T) {
		// Answers are cached for two days, so that the clock can be at a midnight.
		f := newResolverFixture(t, noncestore.NewMemory(100, nil), "      cache: {maxAge: 48h}\n")
		secret := []byte(exampleSecret)
		// A resolver that hands out the date rung of the request's created date.
		f.resolver.answer = func(req *resolverapi.ResolveKeyRequest, resp *resolverapi.ResolveKeyResponse, err error) (*resolverapi.ResolveKeyResponse, error) {
			if err != nil || !strings.HasPrefix(req.GetKeyId(), exampleAKID+"/") {
				return resp, err
			}
			date := req.GetCreated().AsTime().UTC().Format("20060102")
			m := hmac.New(sha256.New, []byte("AWS4"+string(secret)))
			m.Write([]byte(date))
			resp.CacheTtlSeconds = 2 * 86400
			resp.Material = &resolverapi.ResolveKeyResponse_DerivedKey{DerivedKey: &resolverapi.DerivedKey{
				Key: m.Sum(nil), From: "date", Scope: map[string]string{"date": date, "region": "us-east-1", "service": "sts"}}}
			return resp, nil
		}
		midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
		now := midnight.Add(30 * time.Second)
		auth := New(f.auth.cfg, Options{Now: func() time.Time { return now }})
		defer auth.Close()
		// Today's key ID, created a few seconds before midnight: within maxAge, and looked
		// up before any signature is checked.
		today := exampleAKID + "/" + midnight.Format("20060102") + "/us-east-1/sts/aws4_request"
		junk := httpsig.Key{Secret: []byte("junk-junk-junk-junk-junk-junk-junk"), KeyID: today}
		if _, err := auth.Authenticate(signed(t, junk, midnight.Add(-20*time.Second))); outcomeOf(err) != httpsig.UnknownKey {
			t.Fatalf("today's key ID created yesterday: %v", err)
		}
		if u, err := auth.Authenticate(signed(t, sigV4Key(exampleAKID, "us-east-1", secret), now)); err != nil || u.Username != "alice" {
			t.Errorf("the key's owner, after someone asked with yesterday's created: %v, %v", u, err)
		}
	})
}

// TestResolverAnswerTextBounded: what a resolver says goes into refusals, which are
// logged and sent to the client; a resolver's strings are bounded there as a client's are.
func TestResolverAnswerTextBounded(t *testing.T) {
	f := newResolverFixture(t, noncestore.NewMemory(100, nil), "")
	f.resolver.answer = func(_ *resolverapi.ResolveKeyRequest, resp *resolverapi.ResolveKeyResponse, err error) (*resolverapi.ResolveKeyResponse, error) {
		if dk, ok := resp.GetMaterial().(*resolverapi.ResolveKeyResponse_DerivedKey); ok {
			dk.DerivedKey.From = strings.Repeat("x", 500_000)
		}
		return resp, err
	}
	_, err := f.auth.Authenticate(signed(t, sigV4Key(exampleAKID, "us-east-1", []byte(exampleSecret)), time.Now()))
	if outcomeOf(err) != ResolverUnavailable || len(err.Error()) > 1000 {
		t.Errorf("a stage of 500,000 bytes: outcome %s, a refusal of %d bytes", outcomeOf(err), len(err.Error()))
	}
}

// silentListenerEnv makes the test binary listen on a unix socket and never answer, for a
// test that runs it as another user: the socket path is its value.
const silentListenerEnv = "KPLUG_TEST_SILENT_LISTENER"

// silentListener listens on sock, says so by creating sock+".ready", and holds every
// connection without a word.
func silentListener(sock string) int {
	l, err := net.Listen("unix", sock)
	if err != nil {
		return 1
	}
	if err := os.WriteFile(sock+".ready", nil, 0o600); err != nil {
		return 1
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return 1
		}
		go func() { // held open, read from, never answered
			_, _ = io.Copy(io.Discard, c)
			_ = c.Close()
		}()
	}
}
