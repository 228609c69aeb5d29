package verifier

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/kplug/kplug/httpsig"
)

// verified is what the Handler checked of an accepted request, kept to compare with
// what goes upstream: the rule of every proxy of kplug that authenticates is that what
// reaches the upstream is what was verified.
type verified struct {
	user        *authenticationv1.UserInfo
	method      string
	path, query string              // @path and @query as verified, before Upstream's path
	fields      map[string][]string // each covered header field present, by lowercase name: its lines
}

// consumed are the covered fields the proxy takes off the request: the signature is the
// proxy's to check, not kube-apiserver's.
var consumed = map[string]bool{"signature": true, "signature-input": true, strings.ToLower(httpsig.CertificateHeader): true}

// newVerified records r as it was authenticated. Every field that any signature in
// Signature-Input covers counts, not only the accepted signature's: stricter, and the
// same whichever RequestAuthenticator accepted the request. inputs are the members of
// Signature-Input as the authenticator parsed them; nil if it did not, and then they are
// parsed here.
func newVerified(r *http.Request, user *authenticationv1.UserInfo, inputs []httpsig.Input) (*verified, error) {
	v := &verified{user: user, method: r.Method, fields: map[string][]string{}}
	v.path, v.query = httpsig.Target(r)
	if inputs == nil {
		var err error
		if inputs, err = httpsig.ParseInputs(r.Header); err != nil {
			return nil, err
		}
	}
	for _, in := range inputs {
		for _, c := range in.Components {
			if strings.HasPrefix(c, "@") || consumed[c] {
				continue
			}
			if lines := fieldLines(r.Header, c); len(lines) > 0 {
				v.fields[c] = lines
			}
		}
	}
	return v, nil
}

type verifiedKey struct{}

func withVerified(ctx context.Context, v *verified) context.Context {
	return context.WithValue(ctx, verifiedKey{}, v)
}

// verifiedOf returns what ServeHTTP verified of the request of ctx, or nil.
func verifiedOf(ctx context.Context) *verified {
	v, _ := ctx.Value(verifiedKey{}).(*verified)
	return v
}

// AlteredError refuses a request that would not reach kube-apiserver as it was verified:
// a covered field that forwarding removes or rewrites (hop-by-hop fields such as TE,
// Keep-Alive or Upgrade without Connection: upgrade; X-Forwarded-*, Forwarded and
// X-Real-Ip, which describe the hop to the proxy), or a request target that Go would send
// re-encoded.
type AlteredError struct {
	// Component is the covered component: a lowercase field name, @method, @path or @query.
	Component string
}

func (e *AlteredError) Error() string {
	if strings.HasPrefix(e.Component, "@") {
		return fmt.Sprintf("the signed %s would not reach kube-apiserver as it was signed: send the request target percent-encoded as Go's net/url encodes it", e.Component)
	}
	return fmt.Sprintf("the signed field %s would not reach kube-apiserver as it was signed (a proxy removes or rewrites it): send the request without covering it", e.Component)
}

// check compares the outgoing request with what was verified; prefix is Upstream's
// escaped path.
func (v *verified) check(out *http.Request, prefix string) error {
	if out.Method != v.method {
		return &AlteredError{Component: "@method"}
	}
	path := out.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	if path != strings.TrimSuffix(prefix, "/")+v.path {
		return &AlteredError{Component: "@path"}
	}
	if out.URL.RawQuery != v.query {
		return &AlteredError{Component: "@query"}
	}
	for _, name := range slices.Sorted(maps.Keys(v.fields)) {
		if !slices.Equal(sentLines(out, name), v.fields[name]) {
			return &AlteredError{Component: name}
		}
	}
	return nil
}

// sentLines are the lines of field name that the transport writes for out. It writes
// User-Agent and Content-Length from its own view of the request, not from the header map.
func sentLines(out *http.Request, name string) []string {
	switch name {
	case "user-agent":
		if ua := out.Header.Get("User-Agent"); ua != "" {
			return []string{ua} // the first line only
		}
		return nil
	case "content-length":
		if out.ContentLength > 0 {
			return []string{strconv.FormatInt(out.ContentLength, 10)}
		}
		return []string{"0"} // written as 0, or not at all: no body either way
	}
	return fieldLines(out.Header, name)
}

// fieldLines are the lines of field name (lowercase) in h, as the transport writes them:
// keys in sorted order, each key's values in order. A key that is not canonical (set in
// the map directly) counts too.
func fieldLines(h http.Header, name string) []string {
	canon := http.CanonicalHeaderKey(name)
	var keys []string
	for k := range h {
		if k == canon || strings.EqualFold(k, name) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 1 {
		return h[keys[0]]
	}
	sort.Strings(keys)
	var lines []string
	for _, k := range keys {
		lines = append(lines, h[k]...)
	}
	return lines
}

var errNotVerified = errors.New("verifier: a request that was not verified is not forwarded")

// checkedTransport refuses, at the last step before the wire, a request that would not
// reach kube-apiserver as it was verified, or that was not verified at all.
type checkedTransport struct {
	base   http.RoundTripper
	prefix string
}

func (t *checkedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	v := verifiedOf(req.Context())
	err := errNotVerified
	if v != nil {
		err = v.check(req, t.prefix)
	}
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	return t.base.RoundTrip(req)
}
