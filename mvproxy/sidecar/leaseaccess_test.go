package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/testlog"
)

// TestServeEndsWhenLeasesAreForbidden covers issue 32: a sidecar whose user may not use
// the Leases of its namespace (the flag left at a namespace the RBAC does not cover)
// said it was serving, then logged the apiserver's 403 forever. It must end Serve with a
// *LeaseAccessError naming the namespace and what to grant, once the refusal outlasts
// the grace; a refusal that ends within the grace (RBAC just applied) must not.
func TestServeEndsWhenLeasesAreForbidden(t *testing.T) {
	for _, tt := range []struct {
		name      string
		refusals  int32 // how many lists are refused; -1: all
		grace     time.Duration
		wantEnded bool
	}{
		{"refused for good", -1, 600 * time.Millisecond, true},
		// The grace far outlasts the two refusals, whoever (the check or the informer) gets them.
		{"refused, then allowed", 2, time.Minute, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestCAs(t)
			b := c.startBackend(t, "server-0", discoverytest.Document("/v1/pods"))
			forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "",
				errors.New(`User "kplug-peerproxy" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"`))
			var lists atomic.Int32
			c.client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				if n := lists.Add(1); tt.refusals < 0 || n <= tt.refusals {
					return true, nil, forbidden
				}
				return false, nil, nil
			})
			ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			o, _ := c.options(t, "server-0", b, ln)
			o.Namespace = "kube-system"
			o.leaseForbiddenGrace = tt.grace
			logs := &testlog.Buffer{}
			o.Logger = slog.New(slog.NewTextHandler(logs, nil))
			s, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			served := make(chan error, 1)
			go func() { served <- s.Serve(ctx) }()

			if !tt.wantEnded {
				// Allowed after two refusals: the sidecar keeps its Lease like any other.
				poll.Until(t, "the sidecar's Lease", func() bool {
					l, err := c.client.CoordinationV1().Leases("kube-system").Get(t.Context(), o.ID, metav1.GetOptions{})
					return err == nil && l != nil
				})
				select {
				case err := <-served:
					t.Fatalf("Serve ended after the refusals stopped: %v", err)
				default:
				}
				cancel()
				if err := <-served; err != nil {
					t.Fatalf("Serve after cancel: %v", err)
				}
				return
			}
			var err2 error
			select {
			case err2 = <-served:
			case <-time.After(30 * time.Second):
				t.Fatalf("Serve still runs with its Leases forbidden; log:\n%s", logs)
			}
			var lae *LeaseAccessError
			if !errors.As(err2, &lae) || lae.Namespace != "kube-system" || !apierrors.IsForbidden(err2) {
				t.Fatalf("Serve: %v; want a *LeaseAccessError for kube-system wrapping the 403", err2)
			}
			want := `sidecar: the sidecar's user may not list Leases in namespace "kube-system": grant it get, list, watch, create, update and delete on leases there (docs/peerproxy-rbac.yaml does, in namespace kplug-peerproxy): ` + forbidden.Error()
			if err2.Error() != want {
				t.Errorf("Serve:\n%s\nwant\n%s", err2, want)
			}
			if strings.Contains(logs.String(), "E1") || strings.Contains(logs.String(), "reflector.go") {
				t.Errorf("klog's format in the sidecar's log:\n%s", logs)
			}
		})
	}
}
