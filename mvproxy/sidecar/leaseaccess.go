package sidecar

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultNamespace holds the identity Leases when Options.Namespace is empty: the
// namespace docs/peerproxy-rbac.yaml creates, where only the sidecars' user may write
// Leases. Not kube-system, where a user that may write Leases may also write those of
// kube-apiserver's identity and of the controllers' leader election.
const DefaultNamespace = "kplug-peerproxy"

// LeaseAccessError is Serve's end when the apiserver keeps refusing the sidecar's user
// the identity Leases in Namespace (403): without them the sidecar can neither find its
// peers nor be found, and waiting does not help.
type LeaseAccessError struct {
	Namespace string
	// Err is the apiserver's refusal.
	Err error
}

func (e *LeaseAccessError) Error() string {
	return fmt.Sprintf("the sidecar's user may not list Leases in namespace %q: grant it get, list, watch, create, update and delete on leases there (docs/peerproxy-rbac.yaml does, in namespace %s): %v",
		e.Namespace, DefaultNamespace, e.Err)
}

func (e *LeaseAccessError) Unwrap() error { return e.Err }

// checkLeaseAccess lists the identity Leases until the apiserver answers: nil once it
// lists them, a *LeaseAccessError once it has refused them (403) for the whole grace,
// nil when ctx ends. Other failures (the apiserver not up yet) are retried, and restart
// the grace.
func (s *Sidecar) checkLeaseAccess(ctx context.Context) error {
	leases := s.o.Client.CoordinationV1().Leases(s.o.Namespace)
	var refusedSince time.Time
	wait := 500 * time.Millisecond
	for {
		_, err := leases.List(ctx, metav1.ListOptions{LabelSelector: LeaseLabel + "=" + LeaseLabelValue, Limit: 1})
		switch {
		case err == nil || ctx.Err() != nil:
			return nil
		case apierrors.IsForbidden(err):
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
			if time.Since(refusedSince) >= s.o.leaseForbiddenGrace {
				return &LeaseAccessError{Namespace: s.o.Namespace, Err: err}
			}
			s.o.Logger.Warn("the apiserver refuses the identity leases; giving up unless it allows them soon",
				"namespace", s.o.Namespace, "err", err)
		default:
			refusedSince = time.Time{}
			s.o.Logger.Debug("listing identity leases", "namespace", s.o.Namespace, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}
