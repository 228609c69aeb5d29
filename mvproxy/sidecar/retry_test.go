package sidecar

import (
	"io"
	"net/http"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// answer sends method to url with body (none when empty) and returns the status, whether
// it said Retry-After, and the body.
func answer(t *testing.T, c *http.Client, method, url, body string) (int, bool, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After") != "", string(b)
}

// TestSidecarSaysRetryOnlyForWhatWasNotProcessed is the regression test of a bug the load
// and fault harness (issue 18) looks for: a 503 with Retry-After tells clients such as
// client-go to send the request again, so the sidecar may say it only when the apiserver
// cannot have processed the request (it was never sent) or when sending it again is
// harmless (GET). It used to say it for every request whose connection failed, including
// a create the apiserver had received whole before the connection went: client-go then
// created a second object (generateName) or reported a create that had succeeded as 409.
func TestSidecarSaysRetryOnlyForWhatWasNotProcessed(t *testing.T) {
	c := twoServers(t)
	client := c.httpClient(t, nil, tokenBob)
	jobs := c.nodes[0].srv.URL + "/apis/batch/v1/namespaces/default/jobs" // only server 0 serves them
	local := c.nodes[0].backend
	local.drop.Store(true)

	code, retry, body := answer(t, client, http.MethodPost, jobs, `{"kind":"Job"}`)
	if local.received.Load() != 1 {
		t.Fatalf("the apiserver received %d requests, want the POST", local.received.Load())
	}
	if code != http.StatusServiceUnavailable || retry || !strings.Contains(body, "may have been processed") {
		t.Errorf("POST the apiserver received, then the connection dropped: %d, Retry-After %v: %s; want 503 without Retry-After, saying it may have been processed", code, retry, body)
	}
	// A read is answered with Retry-After all the same: repeating it is harmless.
	if code, retry, body := answer(t, client, http.MethodGet, jobs, ""); code != http.StatusServiceUnavailable || !retry {
		t.Errorf("GET, connection dropped: %d, Retry-After %v: %s", code, retry, body)
	}
	// A request never sent (nothing listens) may be sent again.
	local.srv.Close()
	if code, retry, body := answer(t, client, http.MethodPost, jobs, `{"kind":"Job"}`); code != http.StatusServiceUnavailable || !retry {
		t.Errorf("POST to a server that is down: %d, Retry-After %v: %s", code, retry, body)
	}
}

// TestSidecarSendsARequestToOnePeerOnly: once a peer may have received a request, the
// sidecar neither tries the next capable peer nor tells the client to retry, unless the
// request is a read. It used to fail over whenever no byte of a body had been read, so a
// DELETE without a body went to every capable peer in turn.
func TestSidecarSendsARequestToOnePeerOnly(t *testing.T) {
	c := newTestCluster(t,
		discoverytest.Document("/v1/pods", "batch/v1/jobs"),
		discoverytest.Document("/v1/pods"))
	// A second capable peer, which reads each request whole and drops the connection.
	dropper := c.startBackend(t, "dropper", discoverytest.Document("/v1/pods", "batch/v1/jobs"))
	dropper.drop.Store(true)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "peerproxy-dropper", Namespace: DefaultNamespace,
			Labels: map[string]string{LeaseLabel: LeaseLabelValue}, Annotations: map[string]string{AddressAnnotation: dropper.srv.Listener.Addr().String()}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("peerproxy-dropper_1")},
	}
	if _, err := c.client.CoordinationV1().Leases(DefaultNamespace).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	jobs := discovery.GVR{Group: "batch", Version: "v1", Resource: "jobs"}
	poll.Until(t, "two capable peers for jobs", func() bool { return len(c.nodes[1].sidecar.dir.Capable(jobs)) == 2 })

	client := c.httpClient(t, nil, tokenBob)
	url := c.nodes[1].srv.URL + "/apis/batch/v1/namespaces/default/jobs/one"
	capable := c.nodes[0].backend
	for range 8 { // the peers are tried in random order
		before := capable.received.Load() + dropper.received.Load()
		code, retry, body := answer(t, client, http.MethodDelete, url, "")
		if sent := capable.received.Load() + dropper.received.Load() - before; sent != 1 {
			t.Fatalf("a DELETE was received by %d peers' apiservers, want 1 (answer %d: %s)", sent, code, body)
		}
		if code != http.StatusOK && (code != http.StatusServiceUnavailable || retry || !strings.Contains(body, "may have been processed")) {
			t.Errorf("DELETE a peer received, then the connection dropped: %d, Retry-After %v: %s", code, retry, body)
		}
	}
	// A read fails over, and a failed one may be retried.
	for range 4 {
		if code, _, body := answer(t, client, http.MethodGet, url, ""); code != http.StatusOK {
			t.Errorf("GET with one capable peer dropping connections: %d %s", code, body)
		}
	}
}
