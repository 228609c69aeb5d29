package mvproxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// A server without batch/v1 sends jobs to the peer that serves them, and answers 503
// rather than 404 while it does not know its peers yet.
func ExampleRoute() {
	jobs, _ := mvproxy.ResourceOf("/apis/batch/v1/namespaces/default/jobs")
	fmt.Println(jobs)
	fmt.Println(mvproxy.Route(mvproxy.RouteInput{IsResource: true, Synced: true, CapablePeers: 1}))
	fmt.Println(mvproxy.Route(mvproxy.RouteInput{IsResource: true, Synced: false}))
	fmt.Println(mvproxy.Route(mvproxy.RouteInput{IsResource: true, Synced: true}))
	// Output:
	// batch/v1/jobs
	// {peer served by a peer}
	// {not-ready discovery caches not synced}
	// {local served by no server}
}

// The filter in front of a server's own handler: this server serves apps/v1, its peer
// batch/v1. A jobs request goes to the peer, as the authenticated user and with the
// one-hop guard; what this server serves, and what no server serves (for the local 404),
// stays here.
func ExampleHandler() {
	peer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "peer, as %s, proxied %s", r.Header.Get("X-Remote-User"), r.Header.Get(mvproxy.ProxiedHeader))
	}))
	defer peer.Close()
	peerURL, _ := url.Parse(peer.URL)

	dir := mvproxy.NewDirectory("apiserver-a")
	dir.SetLocal(serves("apps/v1/deployments"))
	dir.SetPeer(mvproxy.PeerInfo{ID: "apiserver-b", Address: peerURL.Host, Holder: "apiserver-b_1"})
	dir.SetPeerDocument("apiserver-b", "apiserver-b_1", serves("batch/v1/jobs"))
	dir.MarkPeersSynced()

	local := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "local") })
	filter, err := mvproxy.NewHandler(mvproxy.HandlerOptions{
		Local:         local,
		Directory:     dir,
		PeerTransport: peer.Client().Transport, // in a cluster: the peer CA, DefaultPeerServerName, the proxy client certificate
		Identify: func(*http.Request) (mvproxy.Caller, error) {
			// in a k8s.io/apiserver chain: the user request.UserFrom finds in the context
			return mvproxy.Caller{User: &mvproxy.Identity{Name: "alice"}}, nil
		},
	})
	if err != nil {
		panic(err)
	}
	for _, path := range []string{
		"/apis/apps/v1/namespaces/default/deployments",
		"/apis/batch/v1/namespaces/default/jobs",
		"/apis/example.com/v1/widgets",
	} {
		rec := httptest.NewRecorder()
		filter.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Body)
		fmt.Printf("%s: %s\n", path, body)
	}
	// Output:
	// /apis/apps/v1/namespaces/default/deployments: local
	// /apis/batch/v1/namespaces/default/jobs: peer, as alice, proxied true
	// /apis/example.com/v1/widgets: local
}

// serves is the discovery of a server that serves the "group/version/resource"s.
func serves(gvrs ...string) *discovery.Document {
	groups := discovery.NewList()
	for _, s := range gvrs {
		p := strings.Split(s, "/")
		groups.Items = append(groups.Items, apidiscoveryv2.APIGroupDiscovery{
			ObjectMeta: metav1.ObjectMeta{Name: p[0]},
			Versions:   []apidiscoveryv2.APIVersionDiscovery{{Version: p[1], Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: p[2]}}}},
		})
	}
	return discovery.NewDocument(groups, nil)
}
