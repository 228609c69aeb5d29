package verifier

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/httpsig"
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(silentListenerEnv); sock != "" {
		os.Exit(silentListener(sock))
	}
	goleak.VerifyTestMain(m)
}

// fakeAuth accepts every request as user, or refuses it with err, and records the
// headers it was shown.
type fakeAuth struct {
	user *authenticationv1.UserInfo
	err  error
	mu   sync.Mutex
	saw  http.Header
}

func (f *fakeAuth) Authenticate(r *http.Request) (*authenticationv1.UserInfo, error) {
	f.mu.Lock()
	f.saw = r.Header.Clone()
	f.mu.Unlock()
	return f.user, f.err
}

// upstream records the headers of each request it serves.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		_, _ = io.WriteString(w, "upstream "+r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.seen...)
}

func newFrontend(t *testing.T, auth RequestAuthenticator, up *upstream) *httptest.Server {
	t.Helper()
	target, _ := url.Parse(up.URL)
	h, err := NewHandler(HandlerOptions{Authenticator: auth, Upstream: target})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return front
}

var alice = &authenticationv1.UserInfo{
	Username: "cert:alice", UID: "42", Groups: []string{"developers", "ops"},
	Extra: map[string]authenticationv1.ExtraValue{"example.com/uris": {"spiffe://example.org/alice"}},
}

// forge adds every header a client could try to assert an identity with.
func forge(h http.Header) {
	h.Set("X-Remote-User", "admin")
	h.Add("X-Remote-Group", "system:masters")
	h.Set("X-Remote-Uid", "0")
	h.Set("X-Remote-Extra-Scopes", "everything")
	h.Set("x-remote-extra-example.com%2furis", "forged")
	h.Set("Authorization", "Bearer stolen-token")
	h.Set("Proxy-Authorization", "Basic c2VjcmV0")
}

// TestForgedIdentityNeverReachesUpstream: identity headers, a bearer token and proxy
// credentials sent by the client are removed before the authenticator sees the request,
// and the upstream sees only the authenticated user.
func TestForgedIdentityNeverReachesUpstream(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	auth := &fakeAuth{user: alice}
	front := newFrontend(t, auth, up)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, front.URL+"/api/v1/namespaces", nil)
	forge(req.Header)
	req.Header.Set("Signature-Input", `sig1=("@method");keyid="k"`)
	req.Header.Set("Signature", "sig1=:AAAA:")
	req.Header.Set(httpsig.CertificateHeader, ":AAAA:")
	req.Header.Set("Impersonate-User", "bob")
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "upstream /api/v1/namespaces" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	for _, name := range []string{"Authorization", "Proxy-Authorization", "X-Remote-User", "X-Remote-Group", "X-Remote-Uid", "X-Remote-Extra-Scopes", "X-Remote-Extra-Example.com%2furis"} {
		if v := auth.saw.Values(name); len(v) > 0 {
			t.Errorf("the authenticator was shown %s: %q", name, v)
		}
	}
	seen := up.requests()[0]
	want := http.Header{
		"X-Remote-User":                     {"cert:alice"},
		"X-Remote-Uid":                      {"42"},
		"X-Remote-Group":                    {"developers", "ops"},
		"X-Remote-Extra-Example.com%2furis": {"spiffe://example.org/alice"},
		"Impersonate-User":                  {"bob"},
	}
	got := http.Header{}
	for name, v := range seen {
		switch {
		case strings.HasPrefix(name, "X-Remote-"), strings.HasPrefix(name, "Impersonate-"), strings.Contains(name, "Authorization"), strings.HasPrefix(name, "Signature"):
			got[name] = v
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("identity headers upstream (-want +got):\n%s", diff)
	}
}

// A bearer token in a WebSocket subprotocol (which kube-apiserver reads like Authorization)
// never reaches the upstream; the other subprotocols do.
func TestBearerSubprotocolNeverReachesUpstream(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	auth := &fakeAuth{user: alice}
	front := newFrontend(t, auth, up)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, front.URL+"/api/v1/namespaces/default/pods/p/exec", nil)
	req.Header.Add("Sec-WebSocket-Protocol", "v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.c2VjcmV0")
	req.Header.Add("Sec-WebSocket-Protocol", "Base64url.Bearer.Authorization.k8s.io.c2VjcmV0, v4.channel.k8s.io")
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	for who, h := range map[string]http.Header{"authenticator": auth.saw, "upstream": up.requests()[0]} {
		if got := h.Values("Sec-WebSocket-Protocol"); len(got) != 1 || got[0] != "v5.channel.k8s.io, v4.channel.k8s.io" {
			t.Errorf("%s saw Sec-WebSocket-Protocol %q, want the channel protocols only", who, got)
		}
	}
}

func TestConfiguredRequestHeadersAreStripped(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	target, _ := url.Parse(up.URL)
	h, err := NewHandler(HandlerOptions{Authenticator: &fakeAuth{user: alice}, Upstream: target, Headers: RequestHeaders{
		Username: []string{"X-User", "X-Remote-User"}, Group: []string{"X-Groups"}, ExtraPrefix: []string{"X-Extra-"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/api", nil)
	req.Header.Set("X-Remote-User", "admin")
	req.Header.Set("X-Extra-Foo", "bar")
	req.Header.Set("X-Groups", "system:masters")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	seen := up.requests()[0]
	if rec.Code != http.StatusOK || seen.Get("X-Remote-User") != "" || seen.Get("X-Extra-Foo") != "" || seen.Get("X-User") != "cert:alice" ||
		!cmp.Equal(seen.Values("X-Groups"), []string{"developers", "ops"}) || seen.Get("X-Extra-Example.com%2furis") == "" {
		t.Errorf("%d, upstream saw %v", rec.Code, seen)
	}
}

func decodeStatus(t *testing.T, resp *http.Response) metav1.Status {
	t.Helper()
	var s metav1.Status
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRefusedRequestsAre401: an unsigned request (a bearer token alone) and a refused
// signature are answered 401 with a Status naming the reason, and nothing goes upstream.
func TestRefusedRequestsAre401(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct {
		name    string
		auth    RequestAuthenticator
		message string
	}{
		{"bearer token alone", f.auth, "Unauthorized: the request is not signed: send a KEP-6308 HTTP message signature (Signature-Input and Signature)"},
		{"refused", &fakeAuth{err: &httpsig.Error{Outcome: httpsig.Forged, Err: errors.New("the signature does not verify")}}, "Unauthorized: the signature does not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, nil)
			front := newFrontend(t, tc.auth, up)
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, front.URL+"/api", nil)
			req.Header.Set("Authorization", "Bearer secret-token-value")
			resp, err := front.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			s := decodeStatus(t, resp)
			if resp.StatusCode != http.StatusUnauthorized || s.Reason != metav1.StatusReasonUnauthorized || s.Code != 401 || s.Message != tc.message || s.Kind != "Status" {
				t.Errorf("%d %+v", resp.StatusCode, s)
			}
			if strings.Contains(s.Message, "secret-token-value") {
				t.Error("the answer echoes the token")
			}
			if n := len(up.requests()); n != 0 {
				t.Errorf("%d requests went upstream", n)
			}
		})
	}
}

// TestResolverOutageIs503: a request refused because the resolver could not be asked is
// answered 503 with Retry-After, not 401 (it may pass when the resolver is back), and
// nothing goes upstream.
func TestResolverOutageIs503(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	front := newFrontend(t, &fakeAuth{err: &httpsig.Error{Outcome: ResolverUnavailable, Err: errors.New(`authenticator "keys": the resolver is unavailable (Unavailable); retry shortly`)}}, up)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, front.URL+"/api", nil)
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s := decodeStatus(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || s.Reason != metav1.StatusReasonServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		s.Message != `signature proxy: authenticator "keys": the resolver is unavailable (Unavailable); retry shortly` {
		t.Errorf("%d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), s)
	}
	if n := len(up.requests()); n != 0 {
		t.Errorf("%d requests went upstream", n)
	}
}

// TestUpgradePassesThrough: an upgrade (as kubectl exec makes) is authenticated, has its
// forged identity removed, and then carries bytes both ways.
func TestUpgradePassesThrough(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "SPDY/3.1" {
			http.Error(w, "not an upgrade", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n')
		_, _ = brw.WriteString("echo " + line)
		_ = brw.Flush()
	})
	front := newFrontend(t, &fakeAuth{user: alice}, up)
	conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST /api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1\r\nHost: example\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Remote-User: admin\r\nAuthorization: Bearer stolen\r\nContent-Length: 0\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	_, _ = io.WriteString(conn, "ping\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo ping\n" {
		t.Errorf("stream: %q %v", line, err)
	}
	seen := up.requests()[0]
	if seen.Get("X-Remote-User") != "cert:alice" || seen.Get("Authorization") != "" {
		t.Errorf("upgrade upstream headers %v", seen)
	}
}
