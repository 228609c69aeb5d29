package verifier

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/httpsig/resolverapi"
	"github.com/kplug/kplug/internal/certmemo"
	"github.com/kplug/kplug/internal/flight"
	"github.com/kplug/kplug/internal/peercred"
	"github.com/kplug/kplug/internal/privdir"
)

// Outcomes of the resolver backend, beside httpsig's and the certificate backend's.
const (
	// ResolverUnavailable: the resolver could not be asked, or could not record the
	// nonce. The request is refused (fail closed) with 503 and Retry-After: it may be
	// good, and a retry may pass.
	ResolverUnavailable httpsig.Outcome = "resolver_unavailable"
	// Replayed: the resolver has already recorded the signature's nonce for its key.
	Replayed httpsig.Outcome = "replayed"
)

// Nonce handling of a resolver authenticator (KEP-6308 "Replay").
const (
	// NonceConsume asks the resolver to record each accepted signature's nonce, and
	// refuses a signature whose nonce it has seen: the default.
	NonceConsume = "Consume"
	// NonceIgnore records nothing: a captured request can be replayed within maxAge
	// plus maxClockSkew.
	NonceIgnore = "Ignore"
)

// Defaults of a resolver's cache (KEP-6308 "Identity from a resolver").
const (
	DefaultResolverMaxKeys        = 1024
	DefaultResolverCacheMaxAge    = 5 * time.Minute
	DefaultResolverNegativeMaxAge = 10 * time.Second
	// ResolverCallTimeout bounds each call to a resolver.
	ResolverCallTimeout = 5 * time.Second
	// defaultMetadataRefresh is how often Metadata is asked again when the resolver
	// gives no refresh hint.
	defaultMetadataRefresh = time.Minute
	// maxResolverMessage bounds a resolver's answer.
	maxResolverMessage = 1 << 20
)

// relayRefused are the headers an operator may not relay: each has its own configuration
// path, which relaying would route around.
var relayRefused = []string{"Authorization", "Proxy-Authorization", "Signature", "Signature-Input", httpsig.CertificateHeader, "Content-Digest"}

type (
	resolverSpec struct {
		Endpoint       string             `json:"endpoint"`
		KeyIDPrefixes  []string           `json:"keyIDPrefixes,omitempty"`
		RelayedHeaders []string           `json:"relayedHeaders,omitempty"`
		NonceHandling  string             `json:"nonceHandling,omitempty"`
		Cache          *resolverCacheSpec `json:"cache,omitempty"`
	}
	resolverCacheSpec struct {
		MaxKeys        *int32           `json:"maxKeys,omitempty"`
		MaxAge         *metav1.Duration `json:"maxAge,omitempty"`
		NegativeMaxAge *metav1.Duration `json:"negativeMaxAge,omitempty"`
	}
)

// resolverAuthenticator is a configured resolver authenticator.
type resolverAuthenticator struct {
	name           string
	maxAge         time.Duration
	socket         string
	prefixes       []string // empty: every key ID that is not a certificate's
	relayed        []string // canonical header names
	consume        bool
	maxKeys        int
	cacheMaxAge    time.Duration
	negativeMaxAge time.Duration
	userRules      []rule
}

func (s *resolverSpec) compile(path string, out *resolverAuthenticator) error {
	path += ".resolver"
	sock, ok := strings.CutPrefix(s.Endpoint, "unix://")
	switch {
	case s.Endpoint == "":
		return fmt.Errorf("%s.endpoint: required (unix:///path/to/socket)", path)
	case !ok || !filepath.IsAbs(sock):
		return fmt.Errorf("%s.endpoint: %q: want unix:///absolute/path (an abstract socket has no permissions to guard who answers for the cluster)", path, s.Endpoint)
	}
	out.socket = filepath.Clean(sock)
	seen := map[string]bool{}
	for i, p := range s.KeyIDPrefixes {
		switch {
		case p == "" || strings.Contains(p, "/"):
			return fmt.Errorf("%s.keyIDPrefixes[%d]: %q: want the key ID's part before its first \"/\", not empty", path, i, p)
		case strings.HasPrefix(p, strings.TrimSuffix(httpsig.CertificateKeyIDPrefix, ":")):
			return fmt.Errorf("%s.keyIDPrefixes[%d]: %q: certificate key IDs never go to a resolver", path, i, p)
		case seen[p]:
			return fmt.Errorf("%s.keyIDPrefixes[%d]: %q is listed twice", path, i, p)
		}
		seen[p] = true
	}
	out.prefixes = slices.Clone(s.KeyIDPrefixes)
	for i, h := range s.RelayedHeaders {
		name := http.CanonicalHeaderKey(h)
		switch {
		case h == "" || strings.ContainsAny(h, " :\t\r\n"):
			return fmt.Errorf("%s.relayedHeaders[%d]: %q is not a header name", path, i, h)
		case slices.Contains(relayRefused, name) || strings.HasPrefix(name, "Impersonate-"):
			return fmt.Errorf("%s.relayedHeaders[%d]: %s has its own configuration path and may not be relayed", path, i, name)
		case slices.Contains(out.relayed, name):
			return fmt.Errorf("%s.relayedHeaders[%d]: %s is listed twice", path, i, name)
		}
		out.relayed = append(out.relayed, name)
	}
	switch s.NonceHandling {
	case "", NonceConsume:
		out.consume = true
	case NonceIgnore:
	default:
		return fmt.Errorf("%s.nonceHandling: %q: want %s (the default) or %s", path, s.NonceHandling, NonceConsume, NonceIgnore)
	}
	out.maxKeys, out.cacheMaxAge, out.negativeMaxAge = DefaultResolverMaxKeys, DefaultResolverCacheMaxAge, DefaultResolverNegativeMaxAge
	if c := s.Cache; c != nil {
		if c.MaxKeys != nil {
			if *c.MaxKeys <= 0 {
				return fmt.Errorf("%s.cache.maxKeys: %d is not positive", path, *c.MaxKeys)
			}
			out.maxKeys = int(*c.MaxKeys)
		}
		if c.MaxAge != nil {
			if c.MaxAge.Duration < 0 {
				return fmt.Errorf("%s.cache.maxAge: %s is negative", path, c.MaxAge.Duration)
			}
			out.cacheMaxAge = c.MaxAge.Duration
		}
		if c.NegativeMaxAge != nil {
			if c.NegativeMaxAge.Duration < 0 {
				return fmt.Errorf("%s.cache.negativeMaxAge: %s is negative", path, c.NegativeMaxAge.Duration)
			}
			out.negativeMaxAge = c.NegativeMaxAge.Duration
		}
	}
	return nil
}

// admits reports whether the resolver is asked about keyID: by the part before its first
// "/" (a derived key's name), never for a certificate key ID.
func (r *resolverAuthenticator) admits(keyID string) bool {
	if strings.HasPrefix(keyID, httpsig.CertificateKeyIDPrefix) {
		return false
	}
	if len(r.prefixes) == 0 {
		return true
	}
	name, _, _ := strings.Cut(keyID, "/")
	return slices.Contains(r.prefixes, name)
}

// checkResolvers refuses resolvers that would claim the same key IDs: a prefix listed by
// two, or two that list none (KEP-6308: which one answered would depend on the order).
func (c *Config) checkResolvers() error {
	owner := map[string]string{}
	catchAll := ""
	for _, r := range c.resolvers {
		if len(r.prefixes) == 0 {
			if catchAll != "" {
				return fmt.Errorf("httpSignature.authenticators (%s): resolvers %q and %q both list no keyIDPrefixes, so both would claim every key ID", r.name, catchAll, r.name)
			}
			catchAll = r.name
		}
		for _, p := range r.prefixes {
			if other, ok := owner[p]; ok {
				return fmt.Errorf("httpSignature.authenticators (%s).resolver.keyIDPrefixes: %q is also authenticator %q's", r.name, p, other)
			}
			owner[p] = r.name
		}
	}
	return nil
}

// resolversFor are the resolvers asked about keyID, in configuration order: those whose
// prefixes name its first part, then the one that lists no prefixes.
func (c *Config) resolversFor(keyID string) []*resolverAuthenticator {
	var out []*resolverAuthenticator
	for _, r := range c.resolvers {
		if len(r.prefixes) > 0 && r.admits(keyID) {
			out = append(out, r)
		}
	}
	for _, r := range c.resolvers {
		if len(r.prefixes) == 0 && r.admits(keyID) {
			out = append(out, r)
		}
	}
	return out
}

// resolverClient is a resolver authenticator at work: its connection, caches and
// metadata. One per Authenticator.
type resolverClient struct {
	cfg     *resolverAuthenticator
	conn    *grpc.ClientConn
	api     *resolverapi.Client
	metrics *Metrics
	now     func() time.Time // the Authenticator's clock, for the caches
	keys    certmemo.Memo[string, *resolvedKey]
	unknown certmemo.Memo[string, struct{}]
	lookups flight.Group[*resolvedKey]
	meta    atomic.Pointer[metadata]
	metaRun flight.Group[*metadata]
	// refreshing is set while a background Metadata call runs.
	refreshing atomic.Bool
}

// metadata is what the resolver's Metadata said, and when.
type metadata struct {
	ladder  *httpsig.Ladder
	maxAge  time.Duration // 0: the resolver does not narrow it
	refresh time.Duration
	fetched time.Time
}

// resolvedKey is a resolver's answer for a key ID, checked: the material and the user.
type resolvedKey struct {
	algorithm string
	public    any    // a parsed public key, or
	secret    []byte // an hmac-sha256 secret, or
	derived   *resolverapi.DerivedKey
	user      *authenticationv1.UserInfo
	maxAge    time.Duration // 0: not narrowed
}

// errNotServed is a resolver's NotFound.
var errNotServed = errors.New("not served")

func newResolverClient(cfg *resolverAuthenticator, m *Metrics, now func() time.Time) (*resolverClient, error) {
	socket := cfg.socket
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		// The socket's directory is the trust boundary: whoever can put a socket there
		// answers for the cluster. It must be ours, and writable by no one else.
		if err := privdir.Verify(filepath.Dir(socket)); err != nil {
			return nil, fmt.Errorf("the resolver socket's directory: %w", err)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return nil, err
		}
		// The path is followed again by the dial: a parent directory another user can
		// write lets them swap the checked directory for theirs in between (issue 31
		// review, F5). The kernel's word on who listens is what counts; where it cannot be
		// had (not Linux), the directory check stands alone.
		if err := peercred.CheckOwnerOrRoot(c); err != nil && !errors.Is(err, peercred.ErrUnsupported) {
			_ = c.Close()
			return nil, fmt.Errorf("the resolver socket %s: %w", socket, err)
		}
		return c, nil
	}
	conn, err := grpc.NewClient("passthrough:///resolver", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dial), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxResolverMessage)))
	if err != nil {
		return nil, fmt.Errorf("authenticator %q: resolver %s: %w", cfg.name, socket, err)
	}
	r := &resolverClient{cfg: cfg, conn: conn, api: resolverapi.NewClient(conn), metrics: m, now: now}
	r.keys.Size, r.unknown.Size = cfg.maxKeys, cfg.maxKeys
	m.nonceTracking(cfg.name, cfg.consume)
	return r, nil
}

// call makes one call to the resolver under ResolverCallTimeout, with its metrics.
func call[Req, Resp any](ctx context.Context, r *resolverClient, method string, fn func(context.Context, *Req, ...grpc.CallOption) (*Resp, error), req *Req) (*Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, ResolverCallTimeout)
	defer cancel()
	start := time.Now()
	resp, err := fn(ctx, req)
	r.metrics.resolverCall(r.cfg.name, method, status.Code(err).String(), time.Since(start))
	return resp, err
}

// metadata returns the resolver's metadata, asking for it if it has none yet, and in the
// background once its refresh time has passed (what was said stays in use meanwhile).
func (r *resolverClient) metadata(ctx context.Context, now time.Time) (*metadata, error) {
	if m := r.meta.Load(); m != nil {
		if now.Sub(m.fetched) > m.refresh && r.refreshing.CompareAndSwap(false, true) {
			go func() {
				defer r.refreshing.Store(false)
				_, _ = r.fetchMetadata(context.WithoutCancel(ctx))
			}()
		}
		return m, nil
	}
	return r.metaRun.Do(ctx, "", r.fetchMetadata)
}

func (r *resolverClient) fetchMetadata(ctx context.Context) (*metadata, error) {
	resp, err := call(ctx, r, "Metadata", r.api.Metadata, &resolverapi.MetadataRequest{})
	if err != nil {
		return nil, err
	}
	m := &metadata{ladder: resp.GetKeyDerivation().Ladder(), refresh: defaultMetadataRefresh, fetched: time.Now(),
		maxAge: time.Duration(resp.GetMaxSignatureAgeSeconds()) * time.Second}
	if m.ladder != nil {
		if err := m.ladder.Validate(); err != nil {
			return nil, fmt.Errorf("its Metadata states a ladder that does not validate: %w", err)
		}
	}
	if s := resp.GetRefreshHintSeconds(); s > 0 {
		m.refresh = time.Duration(s) * time.Second
	}
	r.meta.Store(m)
	r.metrics.metadataSuccess(r.cfg.name, m.fetched, ladderDigest(m.ladder))
	return m, nil
}

// ladderDigest names a ladder in a metric: the SHA-256 of its JSON, or "" for none.
func ladderDigest(l *httpsig.Ladder) string {
	if l == nil {
		return ""
	}
	b, _ := json.Marshal(l)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// relayedValues are the values of the relayed headers the request carries: each must be
// covered by the signature (else an intermediary could have set it to select another key)
// and have one line.
func (r *resolverClient) relayedValues(req *http.Request, s *httpsig.Signature) (map[string]string, error) {
	if len(r.cfg.relayed) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, name := range r.cfg.relayed {
		values := req.Header.Values(name)
		lower := strings.ToLower(name)
		switch {
		case len(values) == 0:
			continue
		case len(values) > 1:
			return nil, fmt.Errorf("relayed header %s has %d lines; one is required", name, len(values))
		case !slices.Contains(s.Components, lower):
			return nil, fmt.Errorf("relayed header %s is not covered by the signature, so anyone on the way could have set it", name)
		}
		out[lower] = values[0]
	}
	return out, nil
}

// resolverCacheKey is what a resolver's answer is remembered under: everything the
// lookup sends it that may shape the answer, which an unauthenticated client chooses. The
// key ID, the algorithm and the created time's UTC date (a resolver may answer by them:
// NotFound for another algorithm, a key staged at the created date), and a digest of the
// relayed values. Under the key ID alone, a client sending someone else's key ID with
// another algorithm or a created time on the day before would have its answer served to
// that key's owner for as long as it is cached. A key ID, an algorithm and a date hold
// no NUL (they are structured field strings and digits).
func resolverCacheKey(s *httpsig.Signature, relayed map[string]string, names []string) string {
	key := s.KeyID + "\x00" + s.Algorithm + "\x00" + s.Created.UTC().Format("20060102")
	if len(relayed) == 0 {
		return key
	}
	h := sha256.New()
	for _, n := range names {
		v, ok := relayed[strings.ToLower(n)]
		fmt.Fprintf(h, "%t%d:%s", ok, len(v), v)
	}
	return key + "\x00" + hex.EncodeToString(h.Sum(nil))
}

// lookup resolves a key ID through the caches, one call in flight per key.
func (r *resolverClient) lookup(ctx context.Context, s *httpsig.Signature, relayed map[string]string, now time.Time) (*resolvedKey, error) {
	key := resolverCacheKey(s, relayed, r.cfg.relayed)
	if k, ok := r.keys.Get(key, now); ok {
		r.metrics.keyCacheLookup(r.cfg.name, "hit")
		return k, nil
	}
	if _, ok := r.unknown.Get(key, now); ok {
		r.metrics.keyCacheLookup(r.cfg.name, "negative_hit")
		return nil, errNotServed
	}
	r.metrics.keyCacheLookup(r.cfg.name, "miss")
	return r.lookups.Do(ctx, key, func(ctx context.Context) (*resolvedKey, error) {
		if k, ok := r.keys.Get(key, r.now()); ok {
			return k, nil
		}
		resp, err := call(ctx, r, "ResolveKey", r.api.ResolveKey, &resolverapi.ResolveKeyRequest{
			KeyId: s.KeyID, Algorithm: s.Algorithm, Created: timestamppb.New(s.Created), RelayedHeaders: relayed,
		})
		if status.Code(err) == codes.NotFound {
			if r.cfg.negativeMaxAge > 0 {
				r.unknown.Put(key, struct{}{}, r.now().Add(r.cfg.negativeMaxAge))
			}
			return nil, errNotServed
		}
		if err != nil {
			return nil, &unavailable{r.cfg.name, err}
		}
		k, err := r.check(resp)
		if err != nil {
			return nil, err
		}
		ttl := min(time.Duration(resp.GetCacheTtlSeconds())*time.Second, r.cfg.cacheMaxAge)
		if ttl > 0 {
			r.keys.Put(key, k, r.now().Add(ttl))
		}
		return k, nil
	})
}

// badAnswer is an answer the resolver should not have given: the request is refused as
// the resolver being unusable, not as the client's fault.
type badAnswer struct{ err error }

func (b *badAnswer) Error() string { return b.err.Error() }

// check reads a ResolveKey answer: its material, under the algorithm it states, and its
// user, checked as a certificate's mapped user is (reserved names, userValidationRules).
func (r *resolverClient) check(resp *resolverapi.ResolveKeyResponse) (*resolvedKey, error) {
	bad := func(format string, a ...any) error { return &badAnswer{fmt.Errorf(format, a...)} }
	k := &resolvedKey{algorithm: resp.GetAlgorithm(), maxAge: time.Duration(resp.GetMaxSignatureAgeSeconds()) * time.Second}
	switch m := resp.GetMaterial().(type) {
	case *resolverapi.ResolveKeyResponse_PublicKey:
		pub, err := x509.ParsePKIXPublicKey(m.PublicKey)
		if err != nil {
			return nil, bad("its public key does not parse: %v", err)
		}
		k.public = pub
	case *resolverapi.ResolveKeyResponse_Secret:
		if len(m.Secret) == 0 {
			return nil, bad("its secret is empty")
		}
		k.secret = m.Secret
	case *resolverapi.ResolveKeyResponse_DerivedKey:
		if len(m.DerivedKey.GetKey()) == 0 {
			return nil, bad("its derived key is empty")
		}
		k.derived = m.DerivedKey
	default:
		return nil, bad("the answer carries no key material")
	}
	if (k.public != nil) != (k.algorithm != "hmac-sha256") {
		return nil, bad("algorithm %s does not fit the material it sent", httpsig.Quote(k.algorithm))
	}
	u := resp.GetUser()
	if u.GetUsername() == "" {
		return nil, bad("the answer names no user")
	}
	user := &authenticationv1.UserInfo{Username: u.GetUsername(), UID: u.GetUid(), Groups: u.GetGroups()}
	for name, v := range u.GetExtra() {
		if user.Extra == nil {
			user.Extra = map[string]authenticationv1.ExtraValue{}
		}
		user.Extra[name] = v.GetItems()
	}
	if reserved := reservedName(user); reserved != "" {
		return nil, &refusal{authenticator: r.cfg.name, outcome: ReservedName, err: fmt.Errorf("authenticator %q: the resolver names %q, a name only the authentication machinery assigns", r.cfg.name, reserved)}
	}
	if err := check(r.cfg.userRules, map[string]any{"user": userVariable(user)}); err != nil {
		return nil, &refusal{authenticator: r.cfg.name, outcome: UserRule, err: fmt.Errorf("authenticator %q refused user %s: %w", r.cfg.name, httpsig.Quote(user.Username), err)}
	}
	k.user = user
	return k, nil
}

// verificationKey is what a resolved key verifies s with: the public key, the secret, or
// the derived key folded down the ladder for s's own date and the scope the resolver
// states. A derived key's key ID must be what that derivation names: its name, then each
// step's input.
func (r *resolverClient) verificationKey(ctx context.Context, k *resolvedKey, s *httpsig.Signature, now time.Time) (any, error) {
	if s.Algorithm != k.algorithm {
		return nil, fmt.Errorf("the signature's alg %s is not the key's algorithm %s", httpsig.Quote(s.Algorithm), httpsig.Quote(k.algorithm))
	}
	switch {
	case k.public != nil:
		return k.public, nil
	case k.derived == nil:
		return k.secret, nil
	}
	m, err := r.metadata(ctx, now)
	if err != nil {
		return nil, &unavailable{r.cfg.name, err}
	}
	if m.ladder == nil {
		return nil, &badAnswer{errors.New("it sent a derived key but its Metadata states no ladder")}
	}
	return deriveFor(m.ladder, k.derived, s)
}

// deriveFor folds a resolver's derived key for s: the scope the resolver states must
// name exactly the ladder's scope steps and the date steps at or before its stage, whose
// asserted dates must be s's.
func deriveFor(l *httpsig.Ladder, dk *resolverapi.DerivedKey, s *httpsig.Signature) ([]byte, error) {
	name, _, _ := strings.Cut(s.KeyID, "/")
	from := -1
	if dk.GetFrom() != "" {
		if from = l.Step(dk.GetFrom()); from < 0 {
			return nil, &badAnswer{fmt.Errorf("its derived key's stage %s is not a step of its ladder", httpsig.Quote(dk.GetFrom()))}
		}
	}
	scope := map[string]string{}
	asserted := 0
	for i, step := range l.Steps {
		v, ok := dk.GetScope()[step.Name]
		switch {
		case step.Scope:
			if !ok {
				return nil, &badAnswer{fmt.Errorf("its derived key states no value for scope step %s", httpsig.Quote(step.Name))}
			}
			scope[step.Name] = v
			asserted++
		case step.Date != "" && i <= from:
			if !ok {
				return nil, &badAnswer{fmt.Errorf("its derived key, staged after date step %s, does not assert that date", httpsig.Quote(step.Name))}
			}
			asserted++
			want := renderDate(step.Date, s.Created)
			if v != want {
				return nil, fmt.Errorf("the key was derived for %s (step %s), and the signature was created on %s", httpsig.Quote(v), httpsig.Quote(step.Name), want)
			}
		}
	}
	if asserted != len(dk.GetScope()) {
		return nil, &badAnswer{errors.New("its derived key's scope names steps that are neither scope steps nor dates at or before its stage")}
	}
	var key []byte
	var keyID string
	var err error
	if from < 0 {
		key, keyID, err = l.Derive(name, dk.GetKey(), s.Created, scope)
	} else {
		key, keyID, err = l.DeriveFrom(name, dk.GetKey(), dk.GetFrom(), s.Created, scope)
	}
	if err != nil {
		return nil, &badAnswer{err}
	}
	if keyID != s.KeyID {
		return nil, fmt.Errorf("the key derived for this signature's date and the resolver's scope is %s, not the signature's key ID", httpsig.Quote(keyID))
	}
	return key, nil
}

// renderDate is a date step's input for created.
func renderDate(format string, created time.Time) string {
	if format == httpsig.LadderDateDashed {
		return created.UTC().Format("2006-01-02")
	}
	return created.UTC().Format("20060102")
}

// unavailable is a resolver that could not be asked.
type unavailable struct {
	name string
	err  error
}

func (u *unavailable) Error() string {
	return fmt.Sprintf("authenticator %q: the resolver is unavailable (%s); retry shortly", u.name, status.Code(u.err))
}

// consumeNonce records s's nonce with the resolver: a nonce already recorded refuses the
// request as replayed, and a resolver that cannot record it refuses it as unavailable
// (replay protection that lapses when a call fails is none).
func (r *resolverClient) consumeNonce(ctx context.Context, s *httpsig.Signature, maxAge, skew time.Duration) error {
	if !r.cfg.consume {
		return nil
	}
	resp, err := call(ctx, r, "ConsumeNonce", r.api.ConsumeNonce, &resolverapi.ConsumeNonceRequest{
		KeyId: s.KeyID, Nonce: s.Nonce, Created: timestamppb.New(s.Created), ExpiresAt: timestamppb.New(s.Created.Add(maxAge + skew)),
	})
	if err != nil {
		return &refusal{authenticator: r.cfg.name, outcome: ResolverUnavailable, err: fmt.Errorf("authenticator %q: the nonce could not be recorded (%s); retry shortly", r.cfg.name, status.Code(err))}
	}
	if !resp.GetAccepted() {
		return &refusal{authenticator: r.cfg.name, outcome: Replayed, err: fmt.Errorf("authenticator %q: signature %s was already used (nonce %s); sign each request afresh", r.cfg.name, httpsig.Quote(s.Label), httpsig.Quote(s.Nonce))}
	}
	return nil
}

// Check asks each resolver for its Metadata, so that a resolver that is absent or states
// an invalid ladder fails a configuration's load rather than its first request.
func (a *Authenticator) Check(ctx context.Context) error {
	var errs []error
	for _, r := range a.resolvers {
		if _, err := r.fetchMetadata(ctx); err != nil {
			errs = append(errs, fmt.Errorf("authenticator %q: resolver %s: %w", r.cfg.name, r.cfg.socket, err))
		}
	}
	return errors.Join(errs...)
}

// Close closes the connections to resolvers. An Authenticator without resolvers needs no
// Close.
func (a *Authenticator) Close() error {
	var errs []error
	for _, r := range a.resolvers {
		errs = append(errs, r.conn.Close())
	}
	return errors.Join(errs...)
}
