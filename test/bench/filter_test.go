package bench

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// TestFilterInAPIServerChain uses the filter as a k8s.io/apiserver-based server would:
// behind authentication, with the user taken from the request context by
// request.UserFrom, and forwarded to the capable peer as front-proxy headers.
func TestFilterInAPIServerChain(t *testing.T) {
	var got http.Header
	peer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		_, _ = io.WriteString(w, "served by the peer")
	}))
	defer peer.Close()
	peerURL, _ := url.Parse(peer.URL)

	dir := mvproxy.NewDirectory("self")
	dir.SetLocal(discovery.NewDocument(list(groups(0, 1, 0)), nil))
	dir.MarkPeersSynced()
	dir.SetPeer(mvproxy.PeerInfo{ID: "peer", Address: peerURL.Host, Holder: "h"})
	dir.SetPeerDocument("peer", "h", discovery.NewDocument(list(groups(1, 1, 1)), nil))

	local := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "served locally") })
	filter, err := mvproxy.NewHandler(mvproxy.HandlerOptions{
		Local: local, Directory: dir, PeerTransport: peer.Client().Transport,
		Identify: func(r *http.Request) (mvproxy.Caller, error) {
			u, ok := request.UserFrom(r.Context())
			if !ok {
				return mvproxy.Caller{}, errors.New("no user in the request context")
			}
			return mvproxy.Caller{User: &mvproxy.Identity{Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// What WithAuthentication does: the user in the context, credentials removed.
	authenticated := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := &user.DefaultInfo{Name: "alice", UID: "u-1", Groups: []string{"devs", "system:authenticated"}, Extra: map[string][]string{"scopes.example/Team": {"blue"}}}
		r.Header.Del("Authorization")
		filter.ServeHTTP(w, r.WithContext(request.WithUser(r.Context(), u)))
	})

	for path, want := range map[string]string{
		"/apis/group000.example.com/v1/namespaces/ns/things0":         "served locally",
		"/apis/only-s1-group000.example.com/v1/namespaces/ns/things0": "served by the peer",
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer secret")
		req.Header.Set("X-Remote-User", "mallory")
		authenticated.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Body.String() != want {
			t.Errorf("%s: %d %q, want %q", path, rec.Code, rec.Body, want)
		}
	}
	if got.Get("X-Remote-User") != "alice" || got.Get("X-Remote-Uid") != "u-1" || len(got.Values("X-Remote-Group")) != 2 ||
		got.Get("X-Remote-Extra-scopes.example%2FTeam") != "blue" || got.Get("Authorization") != "" || got.Get("X-Kubernetes-Peer-Proxied") != "true" {
		t.Errorf("peer saw headers %v", got)
	}
}
