package mvproxy

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"slices"
	"time"

	"github.com/kplug/kplug/internal/certmemo"
	"github.com/kplug/kplug/internal/identityheader"
	"github.com/kplug/kplug/internal/reverseproxy"
)

// Header names of the one-hop guard and of front-proxy (request-header) identity.
const (
	// ProxiedHeader marks a request a peer has already proxied; its value is "true". It is
	// the header kube-apiserver's own mixed version proxy sets and honours.
	ProxiedHeader = "X-Kubernetes-Peer-Proxied"
	// ReroutedHeader is the name KEP-4020 gives the same guard; accepted, never sent.
	ReroutedHeader = "X-Kubernetes-Apiserver-Rerouted"

	// DefaultPeerServerName is the name peers' serving certificates must hold by default:
	// the name kube-apiserver's own peer proxy requires of its peers, which apiserver
	// serving certificates carry and kubelet or workload certificates from the same CA do
	// not. A PeerTransport verifies peers for it, whatever address their Lease names.
	DefaultPeerServerName = "kubernetes.default.svc"
)

// Identity is an authenticated user, forwarded to the next server as front-proxy headers.
type Identity struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Caller is what a Handler knows about who sent a request.
type Caller struct {
	// User is the authenticated user, or nil when the request's own credentials (a
	// bearer token, or none) are to be forwarded as they are.
	User *Identity
	// FromPeer is true when a trusted peer sent the request; only then are the
	// one-hop guard headers honoured.
	FromPeer bool
}

type callerKey struct{}

// CallerFrom returns the Caller a Handler stored in the request context.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

func withCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// SetIdentityHeaders removes every front-proxy identity header (X-Remote-User,
// X-Remote-Uid, X-Remote-Group, X-Remote-Extra-*, in any case) from h and, when u is not
// nil, sets u's, so that no identity header a client sent survives.
func SetIdentityHeaders(h http.Header, u *Identity) {
	identityheader.Default.Set(h, (*identityheader.User)(u))
}

// identityFromHeaders reads the identity a trusted front proxy sent, nil if none.
func identityFromHeaders(h http.Header) *Identity {
	return (*Identity)(identityheader.Default.Read(h))
}

// guardSet reports whether h carries the one-hop guard.
func guardSet(h http.Header) bool {
	return h.Get(ProxiedHeader) == "true" || h.Get(ReroutedHeader) == "true"
}

func deleteGuard(h http.Header) {
	h.Del(ProxiedHeader)
	h.Del(ReroutedHeader)
}

// ForwardIdentity prepares pr.Out, a request sent on the caller's behalf to a server that
// trusts this one's proxy client certificate: a peer, or the stock kube-apiserver behind
// a sidecar. It sets X-Forwarded-*; it replaces the front-proxy identity headers with the
// caller's (CallerFrom), and drops Authorization when the caller's user travels in them;
// it sets the one-hop guard when guard is true or pr.In carries it, which behind a Handler
// means that a trusted peer sent it, and removes it otherwise.
func ForwardIdentity(pr *httputil.ProxyRequest, guard bool) {
	pr.SetXForwarded()
	guard = guard || guardSet(pr.In.Header)
	deleteGuard(pr.Out.Header)
	if guard {
		pr.Out.Header.Set(ProxiedHeader, "true")
	}
	caller, _ := CallerFrom(pr.In.Context())
	SetIdentityHeaders(pr.Out.Header, caller.User)
	if caller.User != nil {
		// The next server learns the user from the headers; a token would be one more
		// secret sent, in Authorization or in a WebSocket subprotocol.
		pr.Out.Header.Del("Authorization")
		reverseproxy.DropBearerSubprotocol(pr.Out.Header)
	}
}

// CertIdentifier tells callers apart by their TLS client certificate, as kube-apiserver
// does: a certificate from RequestHeaderCAs with an allowed common name is a trusted peer
// (or front proxy) whose X-Remote-* headers name the user; a certificate from ClientCAs
// is a user named by its common name, with its organizations as groups; no certificate
// means the request's own credentials are forwarded. Its fields must not change once in
// use, nor may it be copied: it remembers for up to a minute (never past a certificate's
// expiry) which chains verified, so that a client's certificate is not verified again on
// each of its requests.
type CertIdentifier struct {
	ClientCAs        *x509.CertPool
	RequestHeaderCAs *x509.CertPool
	// AllowedNames limits the common names accepted from RequestHeaderCAs; empty allows any.
	AllowedNames []string

	// verified remembers, per presented chain, whether it is a peer's (true) or a user's.
	verified certmemo.Memo[[sha256.Size]byte, bool]
}

// ErrSharedClientCA is CertIdentifier.Validate's refusal of a configuration in which every
// user could assert any identity.
var ErrSharedClientCA = errors.New("mvproxy: ClientCAs and RequestHeaderCAs hold the same CAs and AllowedNames is empty: every user's client certificate would be trusted to assert any identity; use a separate front-proxy CA or set AllowedNames")

// Validate refuses, with ErrSharedClientCA, a CertIdentifier whose ClientCAs and
// RequestHeaderCAs are the same CAs while AllowedNames is empty: a user's client
// certificate would then also pass as a front proxy's, whose X-Remote-* headers name any
// user. kube-apiserver's documentation warns against the same setup.
func (c *CertIdentifier) Validate() error {
	if c.ClientCAs != nil && c.RequestHeaderCAs != nil && len(c.AllowedNames) == 0 && c.ClientCAs.Equal(c.RequestHeaderCAs) {
		return ErrSharedClientCA
	}
	return nil
}

// Identify implements Options.Identify.
func (c *CertIdentifier) Identify(r *http.Request) (Caller, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return Caller{}, nil
	}
	certs := r.TLS.PeerCertificates
	leaf := certs[0]
	key := chainKey(certs)
	now := time.Now()
	asPeer, ok := c.verified.Get(key, now)
	if !ok {
		var until time.Time
		var err error
		if asPeer, until, err = c.verify(certs); err != nil {
			return Caller{}, err
		}
		if limit := now.Add(verifiedFor); limit.Before(until) {
			until = limit
		}
		c.verified.Put(key, asPeer, until)
	}
	if asPeer {
		return Caller{User: identityFromHeaders(r.Header), FromPeer: true}, nil
	}
	return Caller{User: &Identity{Name: leaf.Subject.CommonName, Groups: slices.Clone(leaf.Subject.Organization)}}, nil
}

// verify checks the chain certs (leaf first, then the intermediates the client sent) as
// Identify describes: whether it is a trusted peer's or a user's, and until when the
// verified chain is valid.
func (c *CertIdentifier) verify(certs []*x509.Certificate) (asPeer bool, until time.Time, err error) {
	leaf := certs[0]
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	verify := func(roots *x509.CertPool) (time.Time, error) {
		if roots == nil {
			return time.Time{}, fmt.Errorf("no CA configured")
		}
		chains, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if err != nil {
			return time.Time{}, err
		}
		return certmemo.Expiry(chains[0]), nil
	}
	until, peerErr := verify(c.RequestHeaderCAs)
	if peerErr == nil && (len(c.AllowedNames) == 0 || slices.Contains(c.AllowedNames, leaf.Subject.CommonName)) {
		return true, until, nil
	}
	until, clientErr := verify(c.ClientCAs)
	if clientErr == nil {
		return false, until, nil
	}
	if peerErr == nil {
		return false, time.Time{}, fmt.Errorf("client certificate %q is signed by the request-header CA but its common name is not among the allowed names", leaf.Subject.CommonName)
	}
	return false, time.Time{}, fmt.Errorf("client certificate %q is not signed by the client CA (%w) or the request-header CA (%w)", leaf.Subject.CommonName, clientErr, peerErr)
}

// verifiedFor is how long a verified chain is remembered at most; its certificates'
// expiry cuts it shorter.
const verifiedFor = time.Minute

// chainKey names a presented chain: the digest of each certificate's DER, in order.
func chainKey(certs []*x509.Certificate) [sha256.Size]byte {
	h := sha256.New()
	for _, c := range certs {
		d := sha256.Sum256(c.Raw)
		h.Write(d[:])
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}
