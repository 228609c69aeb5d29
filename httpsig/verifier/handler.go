package verifier

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/identityheader"
	"github.com/kplug/kplug/internal/reverseproxy"
)

// RequestAuthenticator turns a request into a user, or refuses it with an error whose
// message may be shown to the client (it names what and why, and no secret).
// *Authenticator is one.
type RequestAuthenticator interface {
	Authenticate(req *http.Request) (*authenticationv1.UserInfo, error)
}

// signedAuthenticator is a RequestAuthenticator that parsed Signature-Input to accept a
// request, and gives what it found: *Authenticator and *Proxy are.
type signedAuthenticator interface {
	authenticateSigned(req *http.Request) (*authenticationv1.UserInfo, []httpsig.Input, error)
}

// authenticate runs a, and gives the members of Signature-Input from a's own parse when it
// made one (nil when it did not).
func authenticate(a RequestAuthenticator, r *http.Request) (*authenticationv1.UserInfo, []httpsig.Input, error) {
	if s, ok := a.(signedAuthenticator); ok {
		return s.authenticateSigned(r)
	}
	user, err := a.Authenticate(r)
	return user, nil, err
}

// RequestHeaders names the identity headers kube-apiserver reads from its front proxy,
// as its --requestheader-* flags do. The first of each list is set; all are removed from
// clients' requests.
type RequestHeaders struct {
	Username, Group, UID, ExtraPrefix []string
}

// DefaultRequestHeaders are kube-apiserver's conventional names (X-Remote-*).
var DefaultRequestHeaders = RequestHeaders{
	Username:    []string{"X-Remote-User"},
	Group:       []string{"X-Remote-Group"},
	UID:         []string{"X-Remote-Uid"},
	ExtraPrefix: []string{"X-Remote-Extra-"},
}

// HandlerOptions configure NewHandler.
type HandlerOptions struct {
	// Authenticator authenticates each request; required.
	Authenticator RequestAuthenticator
	// Upstream is kube-apiserver's URL; required. Its path, if any, prefixes requests'.
	Upstream *url.URL
	// Transport reaches Upstream and presents the front-proxy client certificate; see
	// UpstreamTransport. Nil means http.DefaultTransport (tests only: kube-apiserver
	// trusts identity headers only from a front-proxy client certificate).
	Transport http.RoundTripper
	// Headers are the identity headers; zero means DefaultRequestHeaders.
	Headers RequestHeaders
	// Logger hears about refused requests (at info) and upstream failures; nil discards.
	Logger *slog.Logger
	// BodyBudget bounds the bytes of request bodies held in memory at once, across all
	// requests: a body is buffered whole to check its digest, once its request's
	// certificate and signature have verified. A request whose body does not fit is
	// answered 429 with Retry-After, and not forwarded. Zero means DefaultBodyBudget; it
	// must be at least httpsig.MaxBodyBytes+1.
	BodyBudget int64
	// BodyReadTimeout bounds the time from a request's headers to the end of its body
	// (a client that trickles its body is cut off); zero means DefaultBodyReadTimeout.
	// Requests without a body (watches, upgrades) are not bound by it.
	BodyReadTimeout time.Duration
	// RefusalWriteTimeout bounds the writing of a refusal (400, 401, 429, 502, 503): a client
	// that has not taken it by then loses its connection. Zero means
	// DefaultRefusalWriteTimeout. Forwarded responses (watches, upgrades) have no bound.
	RefusalWriteTimeout time.Duration
}

// Defaults of HandlerOptions.
const (
	// DefaultBodyBudget holds 21 request bodies of kube-apiserver's largest size at once.
	DefaultBodyBudget = 64 << 20
	// DefaultBodyReadTimeout is kube-apiserver's default request timeout.
	DefaultBodyReadTimeout = time.Minute
	// DefaultRefusalWriteTimeout is client-go's TLS handshake timeout: a client that is
	// reading takes a refusal of a few hundred bytes at once.
	DefaultRefusalWriteTimeout = 10 * time.Second
)

// Handler is the verifying front proxy. It is safe for concurrent use.
type Handler struct {
	o      HandlerOptions
	proxy  *httputil.ReverseProxy
	budget *budget
}

// NewHandler checks o and returns the front proxy. For each request it first refuses
// (400) a Connection header naming anything but close, keep-alive and upgrade, which
// would have the forwarding drop the fields it names, impersonation headers whose lines a
// signature cannot pin down (httpsig.CheckImpersonation), and declared trailers, which no
// signature covers; then it removes every header a
// client could assert an identity with (the identity headers, Authorization,
// Proxy-Authorization), and authenticates what is left: a refused request is answered
// 401 with a metav1.Status naming the reason; an accepted one loses its signature
// fields and X-Real-Ip, gains the identity headers and X-Forwarded-For with the client's
// address, and is forwarded without trailers, upgrades (exec, port-forward) and watches
// included. Impersonate-* headers pass on: the signature covers them and
// kube-apiserver authorizes them against the signer.
//
// What reaches kube-apiserver is what was verified: at the last step before the wire,
// every header field that a signature of the request covers (but the signature fields
// themselves) must be about to leave with the very field lines that were verified, and
// the method, path and query as verified (the path under Upstream's path); a request for
// which that does not hold is answered 400 and not sent. Only @authority changes: the
// client addressed this proxy, which forwards to Upstream.
func NewHandler(o HandlerOptions) (*Handler, error) {
	if o.Authenticator == nil {
		return nil, errors.New("verifier: no Authenticator")
	}
	if o.Upstream == nil || o.Upstream.Scheme == "" || o.Upstream.Host == "" {
		return nil, errors.New("verifier: Upstream must be an absolute URL")
	}
	if len(o.Headers.Username) == 0 {
		o.Headers = DefaultRequestHeaders
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.BodyBudget == 0:
		o.BodyBudget = DefaultBodyBudget
	case o.BodyBudget <= httpsig.MaxBodyBytes:
		return nil, fmt.Errorf("verifier: a body budget of %d bytes cannot hold one body of kube-apiserver's largest size (%d bytes)", o.BodyBudget, httpsig.MaxBodyBytes)
	}
	if o.BodyReadTimeout <= 0 {
		o.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if o.RefusalWriteTimeout <= 0 {
		o.RefusalWriteTimeout = DefaultRefusalWriteTimeout
	}
	h := &Handler{o: o, budget: newBudget(o.BodyBudget)}
	base := o.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	h.proxy = &httputil.ReverseProxy{
		Rewrite:    h.rewrite,
		Transport:  &checkedTransport{base: base, prefix: o.Upstream.EscapedPath()},
		BufferPool: reverseproxy.BufferPool,
		ErrorLog:   reverseproxy.ErrorLog(o.Logger),
		// The body has gone upstream once kube-apiserver answers (or the request failed):
		// its bytes go back to the budget then, not when the response has been written,
		// which a client that does not read can put off indefinitely.
		ModifyResponse: func(resp *http.Response) error {
			releaseBudgeted(resp.Request.Context())
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			releaseBudgeted(r.Context())
			if ae := (*AlteredError)(nil); errors.As(err, &ae) {
				h.refuse(w, r, rejection{code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, message: "signature proxy: " + err.Error(),
					level: slog.LevelInfo, event: "signature proxy: refused", attrs: []any{errorAttr(err)}})
				return
			}
			h.refuse(w, r, rejection{code: http.StatusBadGateway, reason: metav1.StatusReasonServiceUnavailable, message: "the signature proxy could not reach kube-apiserver",
				level: slog.LevelWarn, event: "signature proxy: upstream failed", attrs: []any{errorAttr(err)}})
		},
		FlushInterval: -1, // watches and logs stream as they come
	}
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pending := holdUnauthenticated(r) // under Proxy.Serve: its headers, until authenticated
	defer pending.release()
	if err := refuseUnforwardable(r); err != nil {
		h.refuse(w, r, rejection{code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, message: "signature proxy: " + err.Error(),
			level: slog.LevelInfo, event: "signature proxy: refused", attrs: []any{errorAttr(err)}})
		return
	}
	h.strip(r.Header)
	rc := http.NewResponseController(w)
	body := h.budget.wrap(r)
	if body != nil {
		defer body.release()
		// Until the body is in, or for good when the request is refused: the server goes
		// on reading a refused body to reuse the connection, and a client must not hold
		// the connection by trickling it. Unsupported only by test recorders.
		_ = rc.SetReadDeadline(time.Now().Add(h.o.BodyReadTimeout))
	}
	user, inputs, err := authenticate(h.o.Authenticator, r)
	if body != nil && (errors.Is(err, errOverBudget) || errors.Is(err, errOverShare)) {
		h.refuse(w, r, h.overBudget(err))
		return
	}
	if err != nil {
		pending.refused()
		var he *httpsig.Error
		outcome := httpsig.Outcome("")
		if errors.As(err, &he) {
			outcome = he.Outcome
		}
		if outcome == ResolverUnavailable {
			// Fail closed, but say it is not the client's fault: the request may pass
			// once the resolver answers again.
			h.refuse(w, r, rejection{code: http.StatusServiceUnavailable, reason: metav1.StatusReasonServiceUnavailable, message: "signature proxy: " + err.Error(), retryAfter: 1,
				level: slog.LevelWarn, event: "signature proxy: refused, the resolver is unavailable", attrs: []any{"outcome", outcome, errorAttr(err)}})
			return
		}
		h.refuse(w, r, rejection{code: http.StatusUnauthorized, reason: metav1.StatusReasonUnauthorized, message: "Unauthorized: " + err.Error(),
			level: slog.LevelInfo, event: "signature proxy: refused", attrs: []any{"outcome", outcome, errorAttr(err)}})
		return
	}
	pending.authenticated(user.Username)
	if body != nil {
		_ = rc.SetReadDeadline(time.Time{}) // the body is in; an upgraded connection lives on
		body.keep(r)
	}
	v, err := newVerified(r, user, inputs)
	if err != nil { // not reached: the request was accepted with the same fields
		h.refuse(w, r, rejection{code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, message: "signature proxy: " + err.Error(),
			level: slog.LevelInfo, event: "signature proxy: refused", attrs: []any{errorAttr(err)}})
		return
	}
	h.proxy.ServeHTTP(w, r.WithContext(withBudgeted(withVerified(r.Context(), v), body)))
}

// overBudget is the 429 of a body that does not fit the budget, or the signer's share.
func (h *Handler) overBudget(err error) rejection {
	message := fmt.Sprintf("signature proxy: too many request bodies are being checked at once (%d MiB); retry shortly", h.o.BodyBudget>>20)
	if errors.Is(err, errOverShare) {
		message = fmt.Sprintf("signature proxy: too many request bodies of this user are being checked at once (%d MiB); retry shortly", h.budget.share>>20)
	}
	return rejection{code: http.StatusTooManyRequests, reason: metav1.StatusReasonTooManyRequests, retryAfter: 1, message: message,
		level: slog.LevelWarn, event: "signature proxy: request bodies over budget; answering 429", attrs: []any{"budget", h.o.BodyBudget, errorAttr(err)}}
}

// rewrite sets the identity on the outgoing request. It runs after ReverseProxy has
// removed hop-by-hop headers, so a client cannot name an identity header in Connection to
// have it dropped after it was set; ServeHTTP has already removed the client's own.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(h.o.Upstream)
	setHopFields(pr.Out, pr.In.RemoteAddr)
	out := pr.Out.Header
	for _, name := range []string{"Signature", "Signature-Input", httpsig.CertificateHeader} {
		out.Del(name)
	}
	v := verifiedOf(pr.In.Context())
	if v == nil {
		return // not reached: ServeHTTP always sets it, and checkedTransport refuses without it
	}
	u := &identityheader.User{Name: v.user.Username, UID: v.user.UID, Groups: v.user.Groups}
	if len(v.user.Extra) > 0 {
		u.Extra = make(map[string][]string, len(v.user.Extra))
		for k, vs := range v.user.Extra {
			u.Extra[k] = vs
		}
	}
	identityheader.Names(h.o.Headers).Set(out, u)
}

// strip removes every header a client could assert an identity with, and a bearer token
// in a WebSocket subprotocol, which kube-apiserver would read like Authorization.
func (h *Handler) strip(hdr http.Header) {
	hdr.Del("Authorization")
	hdr.Del("Proxy-Authorization")
	reverseproxy.DropBearerSubprotocol(hdr)
	identityheader.Names(h.o.Headers).Strip(hdr)
}

// UpstreamTransport reaches kube-apiserver over TLS, verifying its serving certificate
// with roots and presenting clientCert (the front-proxy client certificate, signed by the
// CA of kube-apiserver's --requestheader-client-ca-file). It speaks HTTP/1.1 only, so
// that SPDY and WebSocket upgrades pass through.
func UpstreamTransport(roots *x509.CertPool, clientCert func() (*tls.Certificate, error)) *http.Transport {
	return reverseproxy.HTTP1Transport(&tls.Config{
		RootCAs:              roots,
		MinVersion:           tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return clientCert() },
	}, 10*time.Second)
}
