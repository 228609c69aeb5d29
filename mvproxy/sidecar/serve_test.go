package sidecar

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/internal/testkit/poll"
)

// Serve owns the sidecar's life: it serves clients on its listener, advertises the
// listener's address in its Lease, and on the end of its context stops serving, deletes
// the Lease and returns nil.
func TestServe(t *testing.T) {
	c := newTestCAs(t)
	b := c.startBackend(t, "server-0", discoverytest.Document("/v1/pods", "batch/v1/jobs"))
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o, _ := c.options(t, "server-0", b, ln)
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()

	leases := c.client.CoordinationV1().Leases(DefaultNamespace)
	poll.Until(t, "the identity Lease with the listener's address", func() bool {
		l, err := leases.Get(ctx, o.ID, metav1.GetOptions{})
		return err == nil && l.Annotations[AddressAnnotation] == ln.Addr().String()
	})
	poll.Until(t, "local discovery and peers synced", s.dir.Synced)
	url := "https://" + ln.Addr().String() + "/apis/batch/v1/namespaces/default/jobs"
	code, got, body := getSeen(t, c.httpClient(t, nil, tokenBob), url, nil)
	if code != http.StatusOK || got.Server != "server-0" || got.User != "bob" {
		t.Fatalf("through Serve: %d %+v %s", code, got, body)
	}

	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after its context ended: %v", err)
	}
	if _, err := leases.Get(t.Context(), o.ID, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("identity Lease after Serve returned: %v, want deleted", err)
	}
	if conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", ln.Addr().String()); err == nil {
		_ = conn.Close()
		t.Error("the listener still accepts connections after Serve returned")
	}
}

func TestServeListenError(t *testing.T) {
	c := newTestCAs(t)
	b := c.startBackend(t, "server-0", discoverytest.Document("/v1/pods"))
	taken, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	o, _ := c.options(t, "server-0", b, nil)
	o.Listener, o.ListenAddress = nil, taken.Addr().String()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Serve(t.Context())
	if want := "sidecar: listening on " + taken.Addr().String() + ": "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Serve on a taken address: %v, want %q...", err, want)
	}
}
