package sidecar

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/transport"
	"k8s.io/utils/ptr"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// Server 0 serves batch/v1 jobs; server 1 serves apps/v1 deployments; both serve pods.
func twoServers(t *testing.T) *testCluster {
	return newTestCluster(t,
		discoverytest.Document("/v1/pods", "batch/v1/jobs"),
		discoverytest.Document("/v1/pods", "apps/v1/deployments"))
}

func getSeen(t *testing.T, c *http.Client, url string, hdr http.Header) (int, seen, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var s seen
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, body)
		}
	}
	return resp.StatusCode, s, string(body)
}

func TestSidecarRoutesAndForwardsIdentity(t *testing.T) {
	c := twoServers(t)
	alice := clientCert(t, c.clientCA, "alice", "developers")
	forged := http.Header{
		"X-Remote-User": {"admin"}, "X-Remote-Group": {"system:masters"}, "X-Remote-Extra-Scopes": {"all"},
		"X-Kubernetes-Peer-Proxied": {"true"}, "X-Kubernetes-Apiserver-Rerouted": {"true"},
	}
	tests := []struct {
		name   string
		client *http.Client
		via    int
		path   string
		want   seen
	}{
		{"token user, local", c.httpClient(t, nil, tokenBob), 0, "/apis/batch/v1/namespaces/default/jobs",
			seen{Server: "server-0", User: "bob", Token: true}},
		{"token user, proxied keeps the token", c.httpClient(t, nil, tokenBob), 1, "/apis/batch/v1/namespaces/default/jobs",
			seen{Server: "server-0", User: "bob", Token: true, Proxied: "true"}},
		{"certificate user, local, as front-proxy identity", c.httpClient(t, &alice, ""), 1, "/apis/apps/v1/deployments",
			seen{Server: "server-1", User: "alice", Groups: []string{"developers"}, Remote: true}},
		{"certificate user, proxied, as front-proxy identity", c.httpClient(t, &alice, ""), 0, "/apis/apps/v1/namespaces/ns/deployments/d/status",
			seen{Server: "server-1", User: "alice", Groups: []string{"developers"}, Remote: true, Proxied: "true"}},
		{"core resource served locally", c.httpClient(t, nil, tokenBob), 1, "/api/v1/pods",
			seen{Server: "server-1", User: "bob", Token: true}},
		{"anonymous, proxied", c.httpClient(t, nil, ""), 1, "/apis/batch/v1/jobs",
			seen{Server: "server-0", User: "system:anonymous", Proxied: "true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Proto = "HTTP/2.0" // to the apiserver, and to the peer (TestSidecarSpeaksHTTP2Upstream)
			// Forged identity and loop-guard headers change nothing.
			for _, hdr := range []http.Header{nil, forged} {
				code, got, body := getSeen(t, tt.client, c.nodes[tt.via].srv.URL+tt.path, hdr)
				if code != http.StatusOK {
					t.Fatalf("status %d: %s", code, body)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("forged headers %v: backend saw (-want +got):\n%s", hdr != nil, diff)
				}
			}
		})
	}

	want := `
# HELP apiserver_rerouted_request_total Total number of requests that were proxied to a peer because the local apiserver was not capable of serving it, by status code and the requested group, version and resource.
# TYPE apiserver_rerouted_request_total counter
apiserver_rerouted_request_total{code="200",group="batch",resource="jobs",version="v1"} 4
`
	if err := testutil.GatherAndCompare(c.nodes[1].reg, strings.NewReader(want), "apiserver_rerouted_request_total"); err != nil {
		t.Error(err)
	}
}

// TestSidecarManyGroups (issue 28): Go 1.27 answers 431 to a request with more than 500
// header values unless its server says otherwise, and a user in many groups sends a line
// for each, as Impersonate-Group, and as X-Remote-Group once a sidecar forwards the user
// to its apiserver or a peer. The sidecar takes what kube-apiserver takes, from clients
// and from peers. (Built with Go 1.26, which counts no values, this passes without the
// sidecar's limits too.)
func TestSidecarManyGroups(t *testing.T) {
	c := twoServers(t)
	groups := make([]string, 600)
	for i := range groups {
		groups[i] = fmt.Sprintf("group-%03d", i)
	}
	carol := clientCert(t, c.clientCA, "carol", groups...)
	for _, via := range []int{0, 1} { // server 1 serves deployments, server 0 forwards them
		code, got, body := getSeen(t, c.httpClient(t, &carol, ""), c.nodes[via].srv.URL+"/apis/apps/v1/deployments", nil)
		if code != http.StatusOK || got.User != "carol" || !slices.Equal(got.Groups, groups) {
			t.Errorf("a user in 600 groups through server %d: %d, %d groups seen: %.200s", via, code, len(got.Groups), body)
		}
	}
	impersonating := http.Header{"Impersonate-User": {"dave"}, "Impersonate-Group": groups}
	for _, via := range []int{0, 1} { // server 0 serves jobs, server 1 forwards them
		c.nodes[0].backend.header.Store(nil)
		code, _, body := getSeen(t, c.httpClient(t, nil, tokenBob), c.nodes[via].srv.URL+"/apis/batch/v1/jobs", impersonating)
		var got []string
		if h := c.nodes[0].backend.header.Load(); h != nil {
			got = h.Values("Impersonate-Group")
		}
		if code != http.StatusOK || !slices.Equal(got, groups) {
			t.Errorf("600 Impersonate-Group values through server %d: %d, %d seen: %.200s", via, code, len(got), body)
		}
	}
}

func TestSidecarNotFoundAndUnauthenticated(t *testing.T) {
	c := twoServers(t)
	client := c.httpClient(t, nil, tokenBob)
	code, _, body := getSeen(t, client, c.nodes[0].srv.URL+"/apis/nothing.example/v1/foos", nil)
	if code != http.StatusNotFound {
		t.Errorf("resource no server serves: %d %s, want the local 404", code, body)
	}
	stranger := clientCert(t, c.otherCA, "mallory")
	code, _, body = getSeen(t, c.httpClient(t, &stranger, ""), c.nodes[0].srv.URL+"/api/v1/pods", nil)
	if code != http.StatusUnauthorized || !strings.Contains(body, `client certificate \"mallory\" is not signed by the client CA`) {
		t.Errorf("untrusted client certificate: %d %s", code, body)
	}
	// A front-proxy certificate with a name not allowed is no peer.
	wrongName := clientCert(t, c.frontCA, "someone-else")
	code, _, body = getSeen(t, c.httpClient(t, &wrongName, ""), c.nodes[0].srv.URL+"/api/v1/pods", nil)
	if code != http.StatusUnauthorized || !strings.Contains(body, "not among the allowed names") {
		t.Errorf("front-proxy certificate with a wrong name: %d %s", code, body)
	}
}

func TestSidecarPeerProxiedRequestIsServedLocally(t *testing.T) {
	c := twoServers(t)
	// A trusted peer sends the guard: server 1 must not proxy again, so the 404 is local.
	peer := clientCert(t, c.frontCA, "front-proxy-client")
	hdr := http.Header{mvproxy.ProxiedHeader: {"true"}, "X-Remote-User": {"carol"}}
	code, _, body := getSeen(t, c.httpClient(t, &peer, ""), c.nodes[1].srv.URL+"/apis/batch/v1/jobs", hdr)
	if code != http.StatusNotFound {
		t.Errorf("proxied request for a resource served only elsewhere: %d %s, want 404 (one hop)", code, body)
	}
	// The KEP's header name is honoured too.
	hdr = http.Header{mvproxy.ReroutedHeader: {"true"}, "X-Remote-User": {"carol"}}
	if code, _, body = getSeen(t, c.httpClient(t, &peer, ""), c.nodes[1].srv.URL+"/apis/batch/v1/jobs", hdr); code != http.StatusNotFound {
		t.Errorf("rerouted request: %d %s, want 404", code, body)
	}
	// Without the guard the same peer is routed normally, as carol.
	code, got, body := getSeen(t, c.httpClient(t, &peer, ""), c.nodes[1].srv.URL+"/apis/batch/v1/jobs", http.Header{"X-Remote-User": {"carol"}})
	if code != http.StatusOK || got.User != "carol" || got.Server != "server-0" {
		t.Errorf("peer request without guard: %d %+v %s", code, got, body)
	}
}

func TestSidecarStreamsWatches(t *testing.T) {
	c := twoServers(t)
	h2 := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: c.clusterCA.Pool(), MinVersion: tls.VersionTLS12}}
	t.Cleanup(h2.CloseIdleConnections)
	for proto, client := range map[string]*http.Client{
		"HTTP/1.1": c.httpClient(t, nil, tokenBob),
		"HTTP/2.0": {Transport: transport.NewBearerAuthRoundTripper(tokenBob, h2)},
	} {
		t.Run(proto, func(t *testing.T) {
			resp, err := client.Get(c.nodes[1].srv.URL + "/apis/batch/v1/jobs?watch=true")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.Proto != proto {
				t.Errorf("client spoke %s to the sidecar, want %s", resp.Proto, proto)
			}
			r := bufio.NewReader(resp.Body)
			// The first event arrives while the backend is still holding the second back.
			if got := readLine(t, r); got != `{"type":"ADDED","server":"server-0"}` {
				t.Errorf("first event %q", got)
			}
			c.nodes[0].backend.watchStep <- struct{}{}
			if got := readLine(t, r); got != `{"type":"MODIFIED","server":"server-0"}` {
				t.Errorf("second event %q", got)
			}
		})
	}
}

func TestSidecarPassesUpgrades(t *testing.T) {
	c := twoServers(t)
	for via, path := range map[int]string{0: "/apis/apps/v1/namespaces/ns/deployments/d/exec", 1: "/apis/apps/v1/namespaces/ns/deployments/d/exec"} {
		conn, err := tls.Dial("tcp", c.nodes[via].srv.Listener.Addr().String(), &tls.Config{RootCAs: c.clusterCA.Pool(), MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: test-echo\r\n\r\n", path, tokenBob)
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close() // a 101 has no body; the connection carries the protocol
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("via %d: status %d", via, resp.StatusCode)
		}
		fmt.Fprintf(conn, "hello\n")
		if got := readLine(t, r); got != "server-1 echoes hello" {
			t.Errorf("via %d: %q", via, got)
		}
		_ = conn.Close()
		// The apiserver offers HTTP/2 (its upgrade above needed HTTP/1.1), and so does
		// the peer.
		if via == 0 {
			if got := c.nodes[1].peerProto.Load(); got != "HTTP/1.1" {
				t.Errorf("the upgrade reached the peer over %q, want HTTP/1.1", got)
			}
		}
	}
}

// Issue 33: the sidecar spoke HTTP/1.1 to its apiserver and its peers, so that upgrades
// pass, and each watch held a connection of its own, with its buffers and goroutines.
// Now what does not upgrade goes over HTTP/2, to the apiserver and to peers, and
// upgrades still pass (TestSidecarPassesUpgrades); a watch's events still arrive one by
// one (TestSidecarStreamsWatches).
func TestSidecarSpeaksHTTP2Upstream(t *testing.T) {
	c := twoServers(t)
	client := c.httpClient(t, nil, tokenBob)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		// Only server 0 serves jobs: server 1's sidecar forwards to server 0's.
		code, retry, body := answer(t, client, method, c.nodes[1].srv.URL+"/apis/batch/v1/namespaces/default/jobs", `{"kind":"Job"}`)
		var got seen
		if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || retry || err != nil {
			t.Fatalf("%s jobs through the peer: %d %s", method, code, body)
		}
		if got.Server != "server-0" || got.Proto != "HTTP/2.0" {
			t.Errorf("%s jobs through the peer: the apiserver %s saw %s, want server-0 over HTTP/2.0", method, got.Server, got.Proto)
		}
		if p := c.nodes[0].peerProto.Load(); p != "HTTP/2.0" {
			t.Errorf("%s jobs reached the peer's sidecar over %q, want HTTP/2.0", method, p)
		}
	}
}

func TestSidecarFailsOverAndAnswers503(t *testing.T) {
	// Server 0 and 2 serve jobs, server 1 does not.
	c := newTestCluster(t,
		discoverytest.Document("/v1/pods", "batch/v1/jobs"),
		discoverytest.Document("/v1/pods"),
		discoverytest.Document("/v1/pods", "batch/v1/jobs"))
	client := c.httpClient(t, nil, tokenBob)
	url := c.nodes[1].srv.URL + "/apis/batch/v1/jobs"

	// Server 0's sidecar dies without deleting its Lease: server 1 still believes it
	// capable, and fails over to server 2 whichever order it tries them in.
	c.nodes[0].srv.Close()
	for range 4 {
		if code, got, body := getSeen(t, client, url, nil); code != http.StatusOK || got.Server != "server-2" {
			t.Fatalf("with one capable peer dead: %d %+v %s", code, got, body)
		}
	}
	// A POST body no attempt has sent goes to the next peer whole.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader("the body"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got seen
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if got.Body != "the body" || got.Server != "server-2" {
		t.Errorf("POST after failover: %+v", got)
	}

	// With both capable peers gone: 503, not 404.
	c.nodes[2].srv.Close()
	code, _, body := getSeen(t, client, url, nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "batch/v1/jobs is served by 2 peer(s), none reachable") {
		t.Errorf("no capable peer reachable: %d %s", code, body)
	}
	want := `
# HELP apiserver_rerouted_request_total Total number of requests that were proxied to a peer because the local apiserver was not capable of serving it, by status code and the requested group, version and resource.
# TYPE apiserver_rerouted_request_total counter
apiserver_rerouted_request_total{code="200",group="batch",resource="jobs",version="v1"} 5
apiserver_rerouted_request_total{code="503",group="batch",resource="jobs",version="v1"} 1
`
	if err := testutil.GatherAndCompare(c.nodes[1].reg, strings.NewReader(want), "apiserver_rerouted_request_total"); err != nil {
		t.Error(err)
	}
	if n := counter(t, c.nodes[1].reg, "apiserver_peer_proxy_errors_total", "type", mvproxy.ErrorPeerUnreachable, "group", "batch", "version", "v1", "resource", "jobs"); n < 2 {
		t.Errorf("peer_unreachable errors %v, want at least the 2 of the last request", n)
	}
}

func TestSidecarLocalApiserverDown(t *testing.T) {
	c := twoServers(t)
	c.nodes[0].backend.srv.Close()
	for via := range 2 {
		code, _, body := getSeen(t, c.httpClient(t, nil, tokenBob), c.nodes[via].srv.URL+"/apis/batch/v1/jobs", nil)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "the local apiserver is unreachable") {
			t.Errorf("via %d with server 0's apiserver down: %d %s", via, code, body)
		}
	}
}

func TestSidecarMergedDiscovery(t *testing.T) {
	c := newTestCluster(t,
		discoverytest.Document("/v1/pods", "apps/v1/deployments", "batch/v1/jobs"),
		discoverytest.Document("/v1/pods", "apps/v1/deployments", "apps/v1/statefulsets", "example.com/v1/widgets"))
	client := c.httpClient(t, nil, tokenBob)
	fetch := func(via int, accept, inm string) (int, http.Header, []string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, c.nodes[via].srv.URL+"/apis", nil)
		req.Header.Set("Accept", accept)
		if inm != "" {
			req.Header.Set("If-None-Match", inm)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, resp.Header, nil
		}
		parse := discovery.Parse
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/vnd.kubernetes.protobuf") {
			parse = discovery.DecodeProtobuf
		}
		l, err := parse(body)
		if err != nil {
			t.Fatalf("%v: %q", err, body)
		}
		var names []string
		for _, g := range l.Items {
			for _, v := range g.Versions {
				for _, r := range v.Resources {
					names = append(names, g.Name+"/"+v.Version+"/"+r.Resource)
				}
			}
		}
		return resp.StatusCode, resp.Header, names
	}
	reg := c.nodes[0].reg
	counts := func() []float64 {
		return []float64{
			counter(t, reg, "aggregator_discovery_nopeer_requests_total"),
			counter(t, reg, "aggregator_discovery_peer_aggregated_cache_hits_total"),
			counter(t, reg, "aggregator_discovery_peer_aggregated_cache_misses_total"),
		}
	}
	before := counts() // peers' discovery fetches count as local requests too
	// Each server lists its own groups as it serves them, with the resources only its peer
	// serves in the same version after its own (server 1's statefulsets in apps/v1), then
	// the groups only its peer serves.
	wantMerged := [][]string{
		{"apps/v1/deployments", "apps/v1/statefulsets", "batch/v1/jobs", "example.com/v1/widgets"},
		{"apps/v1/deployments", "apps/v1/statefulsets", "example.com/v1/widgets", "batch/v1/jobs"},
	}
	var etags []string
	for via := range 2 {
		_, hdr, got := fetch(via, discovery.AcceptAggregated+",application/json", "")
		if diff := cmp.Diff(wantMerged[via], got); diff != "" {
			t.Errorf("merged via %d (-want +got):\n%s", via, diff)
		}
		if hdr.Get("Content-Type") != discovery.AcceptAggregated || hdr.Get("Vary") != "Accept" {
			t.Errorf("merged via %d: headers %v", via, hdr)
		}
		etags = append(etags, hdr.Get("ETag"))
		if code, _, _ := fetch(via, discovery.AcceptAggregated, hdr.Get("ETag")); code != http.StatusNotModified {
			t.Errorf("If-None-Match with the ETag via %d: %d, want 304", via, code)
		}
	}
	// Protobuf, as clients configured for it ask first: the same merge, the same ETag.
	_, hdr, got := fetch(0, discovery.AcceptAggregatedProtobuf+","+discovery.AcceptAggregated, "")
	if diff := cmp.Diff(wantMerged[0], got); diff != "" {
		t.Errorf("merged protobuf via 0 (-want +got):\n%s", diff)
	}
	if hdr.Get("Content-Type") != discovery.AcceptAggregatedProtobuf || hdr.Get("ETag") != etags[0] || hdr.Get("Vary") != "Accept" {
		t.Errorf("merged protobuf via 0: headers %v, want the JSON answer's ETag %s", hdr, etags[0])
	}
	if code, _, _ := fetch(0, discovery.AcceptAggregatedProtobuf, etags[0]); code != http.StatusNotModified {
		t.Errorf("protobuf If-None-Match with the ETag: %d, want 304", code)
	}
	// profile=nopeer is the local document; any other profile, the KEP's "local" too, is
	// the merged one, as from kube-apiserver.
	if _, _, got := fetch(0, discovery.AcceptNoPeer, ""); !cmp.Equal([]string{"apps/v1/deployments", "batch/v1/jobs"}, got) {
		t.Errorf("profile=nopeer via 0: %v", got)
	}
	if _, _, got := fetch(0, discovery.AcceptAggregated+";profile=local", ""); !cmp.Equal(wantMerged[0], got) {
		t.Errorf("profile=local via 0: %v, want the merged document", got)
	}
	// Server 0 saw one merge and four cache hits (the 304, protobuf and its 304, profile=local),
	// and at least our one local request (its peer's discovery fetches, which may still be
	// under way, count too).
	after := counts()
	if diff := cmp.Diff([]float64{before[1] + 4, before[2] + 1}, after[1:]); diff != "" {
		t.Errorf("cache hits, cache misses (-want +got):\n%s", diff)
	}
	if after[0] < before[0]+1 {
		t.Errorf("local discovery requests went from %v to %v, want at least 1 more", before[0], after[0])
	}

	// When the last peer leaves, the merge is redone without it.
	c.nodes[1].stop()
	poll.Until(t, "server 0 forgets server 1", func() bool { return len(c.nodes[0].sidecar.dir.Peers()) == 0 })
	_, hdr, got = fetch(0, discovery.AcceptAggregated, etags[0])
	if diff := cmp.Diff([]string{"apps/v1/deployments", "batch/v1/jobs"}, got); diff != "" {
		t.Errorf("merged after the peer left (-want +got):\n%s", diff)
	}
	// Without peers, the document and its ETag are the local apiserver's.
	_, localETag, _ := discovery.Encode(c.nodes[0].backend.doc.Groups)
	if hdr.Get("ETag") != localETag {
		t.Errorf("ETag without peers %s, want the local apiserver's %s", hdr.Get("ETag"), localETag)
	}
	// Legacy discovery and /api are the local server's.
	code, _, body := getSeen(t, client, c.nodes[0].srv.URL+"/api", nil)
	if code != http.StatusOK || strings.Contains(body, "widgets") {
		t.Errorf("/api: %d %s", code, body)
	}
}

func TestSidecarIgnoresBadPeers(t *testing.T) {
	c := twoServers(t)
	ctx := t.Context()
	srvGarbage := httptestTLS(t, c, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)
	}))
	untrusted := httptestTLSCert(t, servingCert(t, c.otherCA), c.nodes[0].sidecar.handler)
	hanging := httptestTLS(t, c, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	leases := map[string]string{
		"peerproxy-hanging":   hanging,
		"peerproxy-garbage":   srvGarbage,
		"peerproxy-untrusted": untrusted,
		"peerproxy-bogus":     "not an address",
	}
	for name, addr := range leases {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DefaultNamespace,
				Labels: map[string]string{LeaseLabel: LeaseLabelValue}, Annotations: map[string]string{AddressAnnotation: addr}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name + "_1")},
		}
		if _, err := c.client.CoordinationV1().Leases(DefaultNamespace).Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "bad peers counted", func() bool {
		return discoverySyncErrors(t, c.nodes[1], mvproxy.SyncErrorHostPortResolution) >= 1 && discoverySyncErrors(t, c.nodes[1], mvproxy.SyncErrorFetchDiscovery) >= 3
	})
	// Routing and merged discovery still work, and name only the good peer.
	code, got, body := getSeen(t, c.httpClient(t, nil, tokenBob), c.nodes[1].srv.URL+"/apis/batch/v1/jobs", nil)
	if code != http.StatusOK || got.Server != "server-0" {
		t.Errorf("with bad peers around: %d %+v %s", code, got, body)
	}
	if peers := c.nodes[1].sidecar.dir.Capable(discovery.GVR{Group: "batch", Version: "v1", Resource: "jobs"}); len(peers) != 1 || peers[0].ID != "peerproxy-server-0" {
		t.Errorf("capable peers %v", peers)
	}
	if slices.ContainsFunc(c.nodes[1].sidecar.dir.Peers(), func(p mvproxy.PeerInfo) bool { return p.ID == "peerproxy-bogus" }) {
		t.Error("a Lease with a bogus address became a peer")
	}
}

// httptestTLS serves h with a certificate from the cluster CA and returns its address.
func httptestTLS(t *testing.T, c *testCluster, h http.Handler) string {
	return httptestTLSCert(t, servingCert(t, c.clusterCA), h)
}

func httptestTLSCert(t *testing.T, cert tls.Certificate, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes sidecars refuse
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}
