package mvproxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// newFilter is the Handler as a filter in a k8s.io/apiserver-style chain: the caller comes
// from the request context (here a header set by the test's "authentication").
func newFilter(t testing.TB, dir *Directory, local http.Handler) *Handler {
	t.Helper()
	h, err := NewHandler(HandlerOptions{
		Local: local, Directory: dir, PeerTransport: http.DefaultTransport,
		Identify: func(r *http.Request) (Caller, error) {
			return Caller{User: &Identity{Name: r.Header.Get("Test-User")}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHandlerBeforeSync(t *testing.T) {
	t.Parallel()
	served := 0
	local := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { served++; w.WriteHeader(http.StatusTeapot) })
	dir := NewDirectory("self")
	h := newFilter(t, dir, local)
	tests := []struct {
		path, accept string
		wantCode     int
		wantRetry    bool
	}{
		{"/apis/batch/v1/jobs", "", http.StatusServiceUnavailable, true},
		{"/apis", discovery.AcceptAggregated, http.StatusServiceUnavailable, true},
		{"/apis", discovery.AcceptNoPeer, http.StatusTeapot, false},
		{"/healthz", "", http.StatusTeapot, false},
		{"/apis/batch/v1", "", http.StatusTeapot, false},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, tt.path, nil)
		req.Header.Set("Accept", tt.accept)
		h.ServeHTTP(rec, req)
		if rec.Code != tt.wantCode || (rec.Header().Get("Retry-After") == "1") != tt.wantRetry {
			t.Errorf("%s (%s) before sync: %d, Retry-After %q; want %d, retry %v: %s", tt.path, tt.accept, rec.Code, rec.Header().Get("Retry-After"), tt.wantCode, tt.wantRetry, rec.Body)
		}
		if tt.wantRetry && !strings.Contains(rec.Body.String(), `"reason":"ServiceUnavailable"`) {
			t.Errorf("%s: body %s is no Status", tt.path, rec.Body)
		}
	}
	// Once the local discovery is known, what is local is served even before peers sync.
	dir.SetLocal(discoverytest.Document("batch/v1/jobs"))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/apis/batch/v1/jobs", nil))
	if rec.Code != http.StatusTeapot {
		t.Errorf("local resource before peers synced: %d", rec.Code)
	}
}

func TestHandlerRefreshesLocalOnMiss(t *testing.T) {
	t.Parallel()
	dir := NewDirectory("self")
	dir.SetLocal(discoverytest.Document("batch/v1/jobs"))
	dir.MarkPeersSynced()
	dir.SetPeer(PeerInfo{ID: "peer", Address: "127.0.0.1:1", Holder: "h"})
	dir.SetPeerDocument("peer", "h", discoverytest.Document("example.com/v1/widgets"))
	refreshed := 0
	h := newFilter(t, dir, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	h.o.RefreshLocal = func(context.Context) error {
		refreshed++
		dir.SetLocal(discoverytest.Document("batch/v1/jobs", "new.example.com/v1/things")) // a CRD created since
		return nil
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/apis/new.example.com/v1/things", nil))
	if rec.Code != http.StatusTeapot || refreshed != 1 {
		t.Errorf("new local resource: %d after %d refreshes, want it served locally after 1", rec.Code, refreshed)
	}
}

func TestNewHandlerRequiresOptions(t *testing.T) {
	t.Parallel()
	_, err := NewHandler(HandlerOptions{})
	if err == nil || err.Error() != "mvproxy: NewHandler: missing [Local Directory PeerTransport Identify]" {
		t.Errorf("error %v", err)
	}
}

// A subresource the local server lacks (added in a newer version) goes to a peer that
// lists it; the resource itself and its other subresources stay local.
func TestHandlerRoutesNewSubresourceToPeer(t *testing.T) {
	t.Parallel()
	peer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	defer peer.Close()
	dir := NewDirectory("self")
	dir.SetLocal(discoverytest.Document("/v1/pods", "/v1/pods/status"))
	dir.MarkPeersSynced()
	dir.SetPeer(PeerInfo{ID: "peer", Address: peer.Listener.Addr().String(), Holder: "h"})
	dir.SetPeerDocument("peer", "h", discoverytest.Document("/v1/pods", "/v1/pods/status", "/v1/pods/resize"))
	h := newFilter(t, dir, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	h.peer.Transport.(*failoverTransport).base = peer.Client().Transport
	for path, want := range map[string]int{
		"/api/v1/namespaces/default/pods/p":        http.StatusTeapot,
		"/api/v1/namespaces/default/pods/p/status": http.StatusTeapot,
		"/api/v1/namespaces/default/pods/p/resize": http.StatusAccepted,
		"/api/v1/namespaces/default/pods/p/other":  http.StatusTeapot, // listed nowhere: local
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("%s: %d, want %d", path, rec.Code, want)
		}
	}
}

// Kube-apiserver answers a path it serves nothing at with a 404 whose shape changed in
// 1.38 (kubernetes/kubernetes#138219): plain text from 1.36 for a group or version it does
// not serve, a metav1.Status as JSON from 1.38. The proxy answers no such 404 itself: a
// resource no server serves goes to the local server, and its answer, like a peer's,
// reaches the client unchanged, whichever the shape (issue 28).
func TestHandlerPassesNotFoundOn(t *testing.T) {
	t.Parallel()
	shapes := map[string]struct{ contentType, body string }{
		"1.36": {"text/plain; charset=utf-8", "404 page not found\n"},
		"1.38": {"application/json", `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}` + "\n"},
	}
	for version, shape := range shapes {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			notFound := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", shape.contentType)
				w.Header().Set("X-Content-Type-Options", "nosniff")
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(shape.body))
			})
			peer := httptest.NewTLSServer(notFound)
			defer peer.Close()
			dir := NewDirectory("self")
			dir.SetLocal(discoverytest.Document("/v1/pods"))
			dir.MarkPeersSynced()
			dir.SetPeer(PeerInfo{ID: "peer", Address: peer.Listener.Addr().String(), Holder: "h"})
			dir.SetPeerDocument("peer", "h", discoverytest.Document("example.k8s.io/v1alpha1/widgets"))
			h := newFilter(t, dir, notFound)
			h.peer.Transport.(*failoverTransport).base = peer.Client().Transport
			for path, from := range map[string]string{
				"/apis/nothing.example.com/v1/things":                   "the local server",
				"/apis/example.k8s.io/v1alpha1/namespaces/ns/widgets/w": "the peer",
			} {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
				if rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != shape.contentType || rec.Body.String() != shape.body {
					t.Errorf("%s, answered by %s: %d %s %q; want its 404 unchanged", path, from, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
				}
			}
		})
	}
}

// A request that reaches the peer path without the route ServeHTTP stores fails with an
// error (the ReverseProxy then answers 503) instead of panicking in the proxy.
func TestPeerPathWithoutRoute(t *testing.T) {
	called := false
	ft := &failoverTransport{base: roundTripFunc(func(*http.Request) (*http.Response, error) {
		called = true
		return nil, errors.New("not reached")
	})}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "https://peer/apis/batch/v1/jobs", nil)
	resp, err := ft.RoundTrip(req)
	if resp != nil {
		_ = resp.Body.Close()
	}
	if !errors.Is(err, errNoRoute) || called {
		t.Errorf("RoundTrip without a route: %v (sent: %v), want errNoRoute and nothing sent", err, called)
	}
	ctx := context.WithValue(t.Context(), routeKey{}, &routeState{})
	if _, ok := routeOf(ctx); ok {
		t.Error("routeOf accepts a route with no peer")
	}
}

// A caller whose user travels in the front-proxy headers sends no token of its own to the
// next server: not in Authorization, nor as a WebSocket bearer subprotocol (which
// kube-apiserver reads like Authorization); other subprotocols are kept.
func TestForwardIdentityDropsTheCallersToken(t *testing.T) {
	in := httptest.NewRequestWithContext(withCaller(t.Context(), Caller{User: &Identity{Name: "alice", Groups: []string{"dev"}}}), http.MethodGet, "https://sidecar/api/v1/namespaces/ns/pods/p/exec", nil)
	in.Header.Set("Authorization", "Bearer alice-token")
	in.Header.Add("Sec-WebSocket-Protocol", "v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.YWxpY2UtdG9rZW4")
	pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
	ForwardIdentity(pr, true)
	if got := pr.Out.Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization forwarded: %q", got)
	}
	if got := pr.Out.Header.Values("Sec-WebSocket-Protocol"); len(got) != 1 || got[0] != "v5.channel.k8s.io" {
		t.Errorf("Sec-WebSocket-Protocol forwarded as %q, want only v5.channel.k8s.io", got)
	}
	if got := pr.Out.Header.Get("X-Remote-User"); got != "alice" {
		t.Errorf("X-Remote-User = %q", got)
	}
}
