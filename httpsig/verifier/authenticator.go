package verifier

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/certmemo"
)

// Outcomes of the certificate backend, beside httpsig's, for errors and
// kplug_httpsig_signature_outcomes_total.
const (
	// Unsigned: the request carries neither Signature-Input nor Signature.
	Unsigned httpsig.Outcome = "unsigned"
	// InvalidCertificate: the leaf does not chain to the selected authenticator's anchors
	// at the time of the request (expired, not yet valid, wrongly signed).
	InvalidCertificate httpsig.Outcome = "invalid_certificate"
	// CertificateRule: a certificateValidationRule refused the certificate.
	CertificateRule httpsig.Outcome = "certificate_rule"
	// Unmapped: a claim mapping failed or gave no username.
	Unmapped httpsig.Outcome = "unmapped"
	// ReservedName: the mapped user claims a name the authentication machinery assigns
	// (KEP-6308 "Risks and Mitigations").
	ReservedName httpsig.Outcome = "reserved_name"
	// UserRule: a userValidationRule refused the mapped user.
	UserRule httpsig.Outcome = "user_rule"
)

// Reasons of kplug_httpsig_unclaimed_signatures_total beside httpsig's outcomes (a
// signature refused before an authenticator was selected counts under its outcome).
const (
	// NotCertificate: the keyid is not a certificate keyid, and no resolver claims it.
	NotCertificate httpsig.Outcome = "not_certificate"
	// NoAuthorityKeyID: the leaf has no authority key identifier to select an anchor by.
	NoAuthorityKeyID httpsig.Outcome = "no_authority_key_id"
	// UnknownIssuer: no authenticator's anchor has the leaf's authority key identifier.
	UnknownIssuer httpsig.Outcome = "unknown_issuer"
)

// reservedNames are assigned by the authentication machinery itself; no backend may
// claim them, whatever the configuration (KEP-6308 "Risks and Mitigations").
var reservedNames = map[string]bool{"system:authenticated": true, "system:unauthenticated": true, "system:anonymous": true}

// Options configure an Authenticator.
type Options struct {
	// Metrics records outcomes; nil records nothing.
	Metrics *Metrics
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// CacheSize bounds the validated certificates remembered; zero means DefaultCacheSize.
	CacheSize int
}

// DefaultCacheSize bounds the validated certificates an Authenticator remembers.
const DefaultCacheSize = certmemo.DefaultSize

// Authenticator authenticates signed requests by a Config. It is safe for concurrent use.
type Authenticator struct {
	cfg       *Config
	o         Options
	cache     *certmemo.Memo[cacheKey, *authenticationv1.UserInfo]
	leaves    *httpsig.LeafCache         // parsed, by the bytes received; what they are trusted for is in cache
	resolvers map[string]*resolverClient // by authenticator name
	err       error                      // a resolver client that could not be made
}

// cacheKey is a validated leaf certificate, by the digest of its DER, and the
// authenticator that mapped it to a user.
type cacheKey struct {
	digest        [sha256.Size]byte
	authenticator string
}

// New returns an Authenticator for cfg. With resolver authenticators it holds a
// connection to each resolver, made on first use: Check asks them for their metadata
// now, and Close closes the connections.
func New(cfg *Config, o Options) *Authenticator {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	a := &Authenticator{cfg: cfg, o: o, cache: &certmemo.Memo[cacheKey, *authenticationv1.UserInfo]{Size: o.CacheSize},
		leaves: httpsig.NewLeafCache(o.CacheSize), resolvers: map[string]*resolverClient{}}
	for _, r := range cfg.resolvers {
		c, err := newResolverClient(r, o.Metrics, o.Now)
		if err != nil {
			a.err = errors.Join(a.err, err)
			continue
		}
		a.resolvers[r.name] = c
	}
	return a
}

// refusal is a signature refused by the certificate backend, and the authenticator that
// claimed it ("" when none did).
type refusal struct {
	authenticator string
	outcome       httpsig.Outcome
	err           error
}

func (r *refusal) Error() string { return r.err.Error() }

// Authenticate verifies req's signatures in KEP-6308 "Verification order" and returns
// the user of the first accepted one, or an *httpsig.Error saying why none was. A
// certificate signature selects the authenticator whose trust anchor's subject key
// identifier is the leaf's authority key identifier; that authenticator's maxAge
// applies, then its chain check, certificate rules, claim mappings and user rules, and
// only then, with a key that speaks for a user, the signature and the body's digest: a
// body is never read for a certificate that does not chain to an anchor, whatever key
// it carries. Authenticate leaves the request's headers as they are. A body the
// request's BodyReserver refuses to let it buffer is not a refusal of the signature: its
// error is returned as it is and counts in no metric.
func (a *Authenticator) Authenticate(req *http.Request) (*authenticationv1.UserInfo, error) {
	user, _, err := a.authenticateSigned(req)
	return user, err
}

// authenticateSigned is Authenticate, also giving the members of Signature-Input it
// parsed, so that the Handler does not parse them again.
func (a *Authenticator) authenticateSigned(req *http.Request) (*authenticationv1.UserInfo, []httpsig.Input, error) {
	if req.Header.Get("Signature-Input") == "" && req.Header.Get("Signature") == "" {
		return nil, nil, &httpsig.Error{Outcome: Unsigned, Err: errors.New("the request is not signed: send a KEP-6308 HTTP message signature (Signature-Input and Signature)")}
	}
	now := a.o.Now()
	policy := a.cfg.Policy
	policy.Now = func() time.Time { return now }
	// What the last signature resolved came to: httpsig reports a refusal of resolve's
	// as unknown_key, with its message only.
	var claimed string
	var last *refusal
	var user *authenticationv1.UserInfo
	var resolved *resolution
	resolve := func(s *httpsig.Signature) (any, error) {
		claimed, last, user, resolved = "", nil, nil, nil
		var key any
		var err error
		if s.Certificate == nil {
			resolved, claimed, err = a.fromResolver(req, s, now)
			if err == nil {
				key, user = resolved.key, resolved.user
			}
		} else {
			auth, cerr := a.cfg.claim(s, now)
			if auth != nil {
				claimed = auth.name
			}
			err = cerr
			if err == nil {
				// Trust before use: httpsig reads the body once the signature verifies
				// under the key returned here, so the key must already speak for a user.
				user, err = a.identity(auth, s.Certificate, now)
				key = s.Certificate.PublicKey
			}
		}
		if c, ok := req.Body.(interface{ chargeTo(string) }); ok && err == nil {
			c.chargeTo(user.Username) // the body it reads next is this user's
		}
		if err != nil {
			errors.As(err, &last)
			return nil, err
		}
		return key, nil
	}
	v, err := httpsig.VerifyRequest(req, policy, resolve, httpsig.VerifyOptions{Leaves: a.leaves})
	if he := (*httpsig.Error)(nil); err != nil && !errors.As(err, &he) {
		return nil, nil, err // not a refusal: the server cannot hold the body now
	}
	if err != nil {
		return nil, nil, a.refused(err, claimed, last)
	}
	if n := len(v.Inputs); resolved != nil && resolved.client.cfg.consume && n > 1 {
		// Only the accepted signature's nonce could be recorded: the same request with it
		// removed would pass again under the next (issue 31 review, F4).
		return nil, nil, a.refused(&refusal{authenticator: claimed, outcome: httpsig.Malformed, err: fmt.Errorf("authenticator %q records nonces, and the request carries %d signatures, of which only one could be recorded: sign it once", claimed, n)}, claimed, nil)
	}
	if resolved != nil {
		// Only now, with the signature verified, may its nonce be recorded: an
		// unauthenticated client must not be able to burn another's nonces.
		if err := resolved.client.consumeNonce(req.Context(), v.Signature, resolved.maxAge, policy.MaxClockSkew); err != nil {
			return nil, nil, a.refused(err, claimed, nil)
		}
	}
	a.o.Metrics.outcome(claimed, httpsig.Accepted)
	return user, v.Inputs, nil
}

// resolution is a key a resolver vouched for: the key to verify with, its user, the
// maxAge that applies, and the resolver that records the nonce.
type resolution struct {
	client *resolverClient
	key    any
	user   *authenticationv1.UserInfo
	maxAge time.Duration
}

// fromResolver resolves a signature whose key ID is not a certificate's through the
// resolvers that claim it, in order, until one serves it. It returns the authenticator
// that claimed it ("" when none did).
func (a *Authenticator) fromResolver(req *http.Request, s *httpsig.Signature, now time.Time) (*resolution, string, error) {
	candidates := a.cfg.resolversFor(s.KeyID)
	if len(candidates) == 0 {
		if len(a.cfg.resolvers) == 0 {
			return nil, "", &refusal{outcome: NotCertificate, err: fmt.Errorf("keyid %s is not a certificate keyid (%s...): this verifier has no resolver", httpsig.Quote(s.KeyID), httpsig.CertificateKeyIDPrefix)}
		}
		return nil, "", &refusal{outcome: NotCertificate, err: fmt.Errorf("keyid %s is not a certificate keyid (%s...), and no resolver's keyIDPrefixes names its first part", httpsig.Quote(s.KeyID), httpsig.CertificateKeyIDPrefix)}
	}
	skew := a.cfg.Policy.MaxClockSkew
	age := now.Sub(s.Created)
	for _, rc := range candidates {
		refuse := func(o httpsig.Outcome, err error) (*resolution, string, error) {
			return nil, rc.name, &refusal{authenticator: rc.name, outcome: o, err: err}
		}
		r := a.resolvers[rc.name]
		if r == nil {
			return refuse(ResolverUnavailable, fmt.Errorf("authenticator %q: no connection to its resolver: %w", rc.name, a.err))
		}
		// Before the lookup: an unauthenticated client must not drive resolver calls with
		// timestamps no key could accept.
		if age > rc.maxAge+skew {
			return refuse(httpsig.Stale, fmt.Errorf("signature created %s ago, more than authenticator %q's maxAge %s plus maxClockSkew %s", age.Truncate(time.Second), rc.name, rc.maxAge, skew))
		}
		relayed, err := r.relayedValues(req, s)
		if err != nil {
			return refuse(httpsig.Uncovered, fmt.Errorf("authenticator %q: %w", rc.name, err))
		}
		k, err := r.lookup(req.Context(), s, relayed, now)
		if errors.Is(err, errNotServed) {
			continue
		}
		if err == nil {
			maxAge := rc.maxAge
			if k.maxAge > 0 {
				maxAge = min(maxAge, k.maxAge)
			}
			if m := r.meta.Load(); m != nil && m.maxAge > 0 {
				maxAge = min(maxAge, m.maxAge)
			}
			if age > maxAge+skew {
				return refuse(httpsig.Stale, fmt.Errorf("signature created %s ago, more than the %s its resolver allows plus maxClockSkew %s", age.Truncate(time.Second), maxAge, skew))
			}
			var key any
			if key, err = r.verificationKey(req.Context(), k, s, now); err == nil {
				return &resolution{client: r, key: key, user: k.user, maxAge: maxAge}, rc.name, nil
			}
		}
		var rf *refusal
		var bad *badAnswer
		var down *unavailable
		switch {
		case errors.As(err, &rf):
			return nil, rc.name, err
		case errors.As(err, &bad):
			return refuse(ResolverUnavailable, fmt.Errorf("authenticator %q: the resolver's answer is unusable: %w", rc.name, err))
		case errors.As(err, &down):
			return refuse(ResolverUnavailable, err)
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			return refuse(ResolverUnavailable, &unavailable{rc.name, err})
		}
		return refuse(httpsig.UnknownKey, fmt.Errorf("authenticator %q: %w", rc.name, err))
	}
	return nil, "", &refusal{outcome: httpsig.UnknownKey, err: fmt.Errorf("no resolver serves key %s", httpsig.Quote(s.KeyID))}
}

// refused counts err against the authenticator that claimed the signature, or as
// unclaimed, and returns it as an *httpsig.Error. last is resolve's refusal, if the
// signature got that far.
func (a *Authenticator) refused(err error, claimed string, last *refusal) error {
	outcome := httpsig.Malformed
	var r *refusal
	var he *httpsig.Error
	switch {
	case errors.As(err, &r):
		outcome, claimed = r.outcome, r.authenticator
	case errors.As(err, &he) && he.Outcome == httpsig.UnknownKey && last != nil:
		r = last
		outcome, claimed = r.outcome, r.authenticator
	case he != nil:
		outcome = he.Outcome
	}
	if claimed == "" {
		a.o.Metrics.unclaimedSignature(outcome)
	} else {
		a.o.Metrics.outcome(claimed, outcome)
	}
	if he != nil && r == nil {
		return he
	}
	return &httpsig.Error{Outcome: outcome, Err: err}
}

// claim selects the authenticator of a parsed, policy-checked signature and applies its
// maxAge (KEP-6308 "keyid, and how a request selects an authenticator").
func (c *Config) claim(s *httpsig.Signature, now time.Time) (*x509Authenticator, error) {
	leaf := s.Certificate
	if leaf == nil {
		return nil, &refusal{outcome: NotCertificate, err: fmt.Errorf("keyid %s is not a certificate keyid (%s...): this verifier has no resolver", httpsig.Quote(s.KeyID), httpsig.CertificateKeyIDPrefix)}
	}
	if len(leaf.AuthorityKeyId) == 0 {
		return nil, &refusal{outcome: NoAuthorityKeyID, err: fmt.Errorf("certificate %s has no authority key identifier to select a trust anchor by", certName(leaf.Subject))}
	}
	auth := c.byKeyID[string(leaf.AuthorityKeyId)]
	if auth == nil {
		return nil, &refusal{outcome: UnknownIssuer, err: fmt.Errorf("no authenticator trusts the issuer %s of certificate %s", certName(leaf.Issuer), certName(leaf.Subject))}
	}
	if age := now.Sub(s.Created); age > auth.maxAge+c.Policy.MaxClockSkew {
		return auth, &refusal{authenticator: auth.name, outcome: httpsig.Stale, err: fmt.Errorf("signature created %s ago, more than authenticator %q's maxAge %s plus maxClockSkew %s", age.Truncate(time.Second), auth.name, auth.maxAge, c.Policy.MaxClockSkew)}
	}
	return auth, nil
}

// identity validates a leaf selected by its authority key identifier and maps it to a
// user, or returns what the cache remembers of it. What it concludes is about the
// certificate alone (public, and sent by anyone): the signature still has to verify.
func (a *Authenticator) identity(auth *x509Authenticator, leaf *x509.Certificate, now time.Time) (*authenticationv1.UserInfo, error) {
	key := cacheKey{digest: sha256.Sum256(leaf.Raw), authenticator: auth.name}
	if u, ok := a.cache.Get(key, now); ok {
		a.o.Metrics.cacheLookup(auth.name, true)
		return u, nil
	}
	a.o.Metrics.cacheLookup(auth.name, false)
	refuse := func(o httpsig.Outcome, err error) error {
		return &refusal{authenticator: auth.name, outcome: o, err: err}
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: auth.roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return nil, refuse(InvalidCertificate, fmt.Errorf("authenticator %q: certificate %s: %w", auth.name, certName(leaf.Subject), err))
	}
	vars := map[string]any{"cert": certVariable(leaf)}
	if err := check(auth.certRules, vars); err != nil {
		return nil, refuse(CertificateRule, fmt.Errorf("authenticator %q refused certificate %s: %w", auth.name, certName(leaf.Subject), err))
	}
	user, err := auth.mapping.user(vars)
	if err != nil {
		return nil, refuse(Unmapped, fmt.Errorf("authenticator %q: certificate %s: %w", auth.name, certName(leaf.Subject), err))
	}
	if reserved := reservedName(user); reserved != "" {
		return nil, refuse(ReservedName, fmt.Errorf("authenticator %q mapped certificate %s to %q, a name only the authentication machinery assigns", auth.name, certName(leaf.Subject), reserved))
	}
	if err := check(auth.userRules, map[string]any{"user": userVariable(user)}); err != nil {
		return nil, refuse(UserRule, fmt.Errorf("authenticator %q refused user %s: %w", auth.name, httpsig.Quote(user.Username), err))
	}
	a.cache.Put(key, user, certmemo.Expiry(chains[0]))
	return user, nil
}

// certName is a certificate's subject or issuer as refusals say it: the certificate is the
// client's, and may be self-made with a name of any length.
func certName(n pkix.Name) string { return httpsig.Quote(n.String()) }

func reservedName(u *authenticationv1.UserInfo) string {
	if reservedNames[u.Username] {
		return u.Username
	}
	for _, g := range u.Groups {
		if reservedNames[g] {
			return g
		}
	}
	return ""
}
