package verifier

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/poll"
)

// used is the bytes the budget holds.
func (b *budget) usedBytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// budgetFront is a Handler with a budget of one largest body, in front of upstream, and
// the Handler.
func budgetFront(t *testing.T, f *fixture, upstream string) (*httptest.Server, *Handler) {
	t.Helper()
	target, _ := url.Parse(upstream)
	h, err := NewHandler(HandlerOptions{Authenticator: f.auth, Upstream: target, BodyBudget: httpsig.MaxBodyBytes + 1})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return front, h
}

// postSigned sends a POST of body signed by key and cert to front and returns the status.
func postSigned(t *testing.T, front string, f *fixture, key *ecdsa.PrivateKey, cert *x509.Certificate, body string) int {
	t.Helper()
	const path = "/api/v1/namespaces/default/configmaps"
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, front+path, strings.NewReader(body))
	req.Header = signedHeader(t, key, cert, f.now, path, body)
	req.Host = "example.com"
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	resp, err := transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// holdSigned sends the headers of a signed POST with a Content-Length of announced bytes
// and only the first sent bytes of its body, and leaves the connection open.
func holdSigned(t *testing.T, front string, f *fixture, key *ecdsa.PrivateKey, cert *x509.Certificate, body string, announced, sent int) net.Conn {
	t.Helper()
	const path = "/api/v1/namespaces/default/configmaps"
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", strings.TrimPrefix(front, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var head bytes.Buffer
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: example.com\r\nContent-Length: %d\r\n", path, announced)
	_ = signedHeader(t, key, cert, f.now, path, body).Write(&head)
	head.WriteString("\r\n")
	head.WriteString(body[:sent])
	if _, err := conn.Write(head.Bytes()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestSecurityBodyBudgetFollowsTheBytesReceived (issue 27, F4 of the second review): the
// budget used to be reserved from the Content-Length, which no signature covers, before
// a byte of the body had come. An intermediary that replays a signer's small request
// with a Content-Length of 3 MiB, and sends nothing more, held a budget of one largest
// body for the whole body read timeout, and every other signer's body was answered 429.
// What is reserved now is what has arrived, a chunk at a time.
func TestSecurityBodyBudgetFollowsTheBytesReceived(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	alice, aliceKey := leafFrom(t, f.ca1, "alice", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	bob, bobKey := leafFrom(t, f.ca1, "bob", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	up := newRecordingUpstream(t)
	front, h := budgetFront(t, f, up.URL)
	small := `{"kind":"ConfigMap"}`
	holdSigned(t, front.URL, f, aliceKey, alice, small, httpsig.MaxBodyBytes, 1)
	poll.Until(t, "the held body to be reserved", func() bool { return h.budget.usedBytes() > 0 })
	if code := postSigned(t, front.URL, f, bobKey, bob, strings.Repeat("x", 2<<20)); code != http.StatusOK {
		t.Errorf("bob's 2 MiB body beside a held request that announced 3 MiB and sent 1 byte: %d, want 200 (%d bytes reserved)", code, h.budget.usedBytes())
	}
}

// TestSecurityBodyBudgetShare (issue 27, F4): the budget was one pool for everyone, so a
// signer holding bodies took it from all others. One user holds at most a quarter of it
// (at least one largest body): beyond, that user's bodies are 429, and another's pass.
func TestSecurityBodyBudgetShare(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	alice, aliceKey := leafFrom(t, f.ca1, "alice", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	bob, bobKey := leafFrom(t, f.ca1, "bob", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	up := newRecordingUpstream(t)
	target, _ := url.Parse(up.URL)
	h, err := NewHandler(HandlerOptions{Authenticator: f.auth, Upstream: target, BodyBudget: 4 * (httpsig.MaxBodyBytes + 1)})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	body := strings.Repeat("x", 2<<20)
	// Alice holds 2 MiB of her share (a quarter: 3 MiB and a byte), sending slowly.
	holdSigned(t, front.URL, f, aliceKey, alice, body, len(body), len(body)-1)
	poll.Until(t, "alice's body to be buffered", func() bool { return h.budget.usedBytes() >= 2<<20 })
	if code := postSigned(t, front.URL, f, aliceKey, alice, body); code != http.StatusTooManyRequests {
		t.Errorf("alice's second 2 MiB body beside her first: %d, want 429", code)
	}
	if code := postSigned(t, front.URL, f, bobKey, bob, body); code != http.StatusOK {
		t.Errorf("bob's 2 MiB body: %d, want 200", code)
	}
}

// TestSecurityBodyBudgetReleasedOnceForwarded (issue 27, F4): a body's bytes went back to
// the budget only when the handler returned, after the response had been written. A
// signer that does not read its responses (over HTTP/2, a zero flow-control window) held
// its bodies, and the budget, for as long as it liked. They go back once kube-apiserver
// has answered now, and the bytes are dropped.
func TestSecurityBodyBudgetReleasedOnceForwarded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	alice, aliceKey := leafFrom(t, f.ca1, "alice", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	bob, bobKey := leafFrom(t, f.ca1, "bob", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	big := bytes.Repeat([]byte("y"), 64<<20)
	var aliceForwarded atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Remote-User") == "cert:alice" {
			aliceForwarded.Store(true)
			_, _ = w.Write(big) // more than the sockets between here and alice hold
		}
	}))
	t.Cleanup(up.Close)
	front, h := budgetFront(t, f, up.URL)
	body := strings.Repeat("x", 2<<20)
	// Alice sends her whole body and never reads the answer.
	holdSigned(t, front.URL, f, aliceKey, alice, body, len(body), len(body))
	// Not a wait for her body to be reserved: it may be forwarded and released between
	// two looks.
	poll.Until(t, "alice's body to reach kube-apiserver", aliceForwarded.Load)
	poll.Until(t, "alice's body to be released once forwarded", func() bool { return h.budget.usedBytes() == 0 })
	if code := postSigned(t, front.URL, f, bobKey, bob, body); code != http.StatusOK {
		t.Errorf("bob's 2 MiB body while alice does not read her answer: %d, want 200", code)
	}
}
