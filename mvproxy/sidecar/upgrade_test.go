package sidecar

import (
	"net/http"
	"testing"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// restartBackend stops node n's apiserver double and starts another serving doc at the
// same address, as an apiserver upgraded in place to a version that serves doc.
func (c *testCluster) restartBackend(t *testing.T, n *testNode, doc *discovery.Document) {
	t.Helper()
	addr := n.backend.srv.Listener.Addr().String()
	n.backend.srv.Close()
	n.backend = c.startBackendOn(t, n.backend.name, doc, addr)
}

// Issue 16: an apiserver upgraded under its sidecar kept being sent what its old version
// served until the next periodic refresh of local discovery (10 s by default), and its
// clients got a 404 for resources a peer still served. Now a local server found
// unreachable is not trusted until its discovery was read again: meanwhile what a peer
// serves goes there, and requests make the sidecar read its discovery once it is back.
func TestLocalRestartedAsAnotherVersion(t *testing.T) {
	c := newTestCluster(t,
		discoverytest.Document("/v1/pods", "batch/v1/jobs"),
		discoverytest.Document("/v1/pods", "batch/v1/jobs"))
	client := c.httpClient(t, nil, tokenBob)
	jobs := c.nodes[0].srv.URL + "/apis/batch/v1/jobs"

	c.nodes[0].backend.srv.Close()
	// The request that finds it down (a client's, or a peer's discovery fetch) is answered
	// 503 with Retry-After; the retry goes to the peer.
	if code, got, body := getSeen(t, client, jobs, nil); code != http.StatusServiceUnavailable && got.Server != "server-1" {
		t.Fatalf("jobs when server 0's apiserver just went down: %d %s, want 503 or server-1's answer", code, body)
	}
	if code, got, body := getSeen(t, client, jobs, nil); code != http.StatusOK || got.Server != "server-1" {
		t.Fatalf("jobs while server 0's apiserver is down: %d %+v %s, want server-1's answer", code, got, body)
	}
	// Back as a version without batch/v1.
	c.restartBackend(t, c.nodes[0], discoverytest.Document("/v1/pods"))
	for range 3 {
		if code, got, body := getSeen(t, client, jobs, nil); code != http.StatusOK || got.Server != "server-1" {
			t.Fatalf("jobs after server 0 came back without batch/v1: %d %+v %s, want server-1's answer", code, got, body)
		}
	}
	poll.Until(t, "pods served by server 0 again", func() bool {
		code, got, _ := getSeen(t, client, c.nodes[0].srv.URL+"/api/v1/pods", nil)
		return code == http.StatusOK && got.Server == "server-0"
	})
}

// Issue 16: the same when no request reached the sidecar while its apiserver was down:
// a 404 for a resource its discovery lists makes it read the discovery again (in the
// background, at most once a second: anyone can cause such a 404), and requests go to
// the peer from then on.
func TestLocalRestartedUnnoticed(t *testing.T) {
	c := newTestCluster(t,
		discoverytest.Document("/v1/pods", "batch/v1/jobs", "example.com/v1/widgets"),
		discoverytest.Document("/v1/pods", "batch/v1/jobs"))
	client := c.httpClient(t, nil, tokenBob)
	jobs := c.nodes[0].srv.URL + "/apis/batch/v1/jobs"
	c.restartBackend(t, c.nodes[0], discoverytest.Document("/v1/pods", "example.com/v1/widgets"))
	// (A peer's discovery fetch may find the apiserver down in the moment it restarts;
	// then this request is already routed to the peer.)
	if code, got, body := getSeen(t, client, jobs, nil); code != http.StatusNotFound && got.Server != "server-1" {
		t.Fatalf("the first request after an unnoticed restart: %d %s, want the new apiserver's 404", code, body)
	}
	// Such a 404 changes no routing by itself: what only the local server serves is
	// served at once. Unless a peer's discovery fetch found the apiserver down while it
	// restarted (a local_unreachable error of a non-resource request): then the sidecar
	// distrusts it until its discovery is read again, answers 503 with Retry-After for
	// what no peer serves meanwhile, and serves it again soon.
	widgets := c.nodes[0].srv.URL + "/apis/example.com/v1/widgets"
	if code, got, body := getSeen(t, client, widgets, nil); code != http.StatusOK || got.Server != "server-0" {
		raced := counter(t, c.nodes[0].reg, "apiserver_peer_proxy_errors_total", "type", "local_unreachable", "resource", "") > 0
		if code != http.StatusServiceUnavailable || !raced {
			t.Fatalf("widgets, which only server 0 serves, right after the 404: %d %s", code, body)
		}
		poll.Until(t, "widgets served by server 0 once its discovery was read again", func() bool {
			code, got, _ := getSeen(t, client, widgets, nil)
			return code == http.StatusOK && got.Server == "server-0"
		})
	}
	poll.Until(t, "jobs served by server 1 after the 404", func() bool {
		code, got, _ := getSeen(t, client, jobs, nil)
		return code == http.StatusOK && got.Server == "server-1"
	})
}

// Issue 16: a sidecar whose apiserver started serving something new (upgraded in place)
// told its peers only at their next periodic refresh (1 m by default), and they answered
// 404 for it meanwhile. Now its Lease says so and they read its discovery at once.
func TestPeersLearnALocalChangeAtOnce(t *testing.T) {
	c := newTestCluster(t, discoverytest.Document("/v1/pods"), discoverytest.Document("/v1/pods"))
	c.restartBackend(t, c.nodes[0], discoverytest.Document("/v1/pods", "batch/v1/jobs"))
	if err := c.nodes[0].sidecar.local.forceRefresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	client := c.httpClient(t, nil, tokenBob)
	poll.Until(t, "jobs served through server 1's sidecar", func() bool {
		code, got, _ := getSeen(t, client, c.nodes[1].srv.URL+"/apis/batch/v1/jobs", nil)
		return code == http.StatusOK && got.Server == "server-0"
	})
}
