package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kplug/kplug/mvproxy"
)

// Lease labels and annotations by which sidecars find each other.
const (
	// LeaseLabel marks a sidecar's identity Lease; its value is LeaseLabelValue.
	LeaseLabel      = "peerproxy.kplug.io/identity"
	LeaseLabelValue = "kplug-peerproxy"
	// AddressAnnotation holds the host:port where the sidecar serves its peers.
	AddressAnnotation = "peerproxy.kplug.io/address"
	// DiscoveryAnnotation changes whenever what the sidecar's apiserver serves changes
	// (during an upgrade, when it restarts as another version), so that peers read its
	// discovery again at once rather than at their next periodic refresh.
	DiscoveryAnnotation = "peerproxy.kplug.io/discovery-generation"
)

// LeaseKeeper keeps the sidecar's identity Lease: it removes a leftover Lease of its own
// name at start and, in the background, other sidecars' Leases that nobody renews; it
// renews its own, and deletes it when Run ends. Its fields must not change once Run is
// called.
type LeaseKeeper struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	Address   string // host:port
	Duration  time.Duration
	// Discovery, if set, gives the value of DiscoveryAnnotation.
	Discovery func() string
	// RenewNow, if set, makes Run renew the Lease at once whenever it receives, so that
	// peers see a new Discovery value without waiting for the next renewal.
	RenewNow <-chan struct{}
	Logger   *slog.Logger

	holderOnce sync.Once
	holder     string
}

// Holder returns the holder identity, which is new for every LeaseKeeper. It is safe
// for concurrent use.
func (k *LeaseKeeper) Holder() string {
	k.holderOnce.Do(func() {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		k.holder = k.Name + "_" + hex.EncodeToString(b)
	})
	return k.holder
}

// Run keeps the Lease until ctx ends, then deletes it.
func (k *LeaseKeeper) Run(ctx context.Context) {
	leases := k.Client.CoordinationV1().Leases(k.Namespace)
	// A restart is seen by peers as delete-then-add.
	if err := leases.Delete(ctx, k.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		k.Logger.Debug("deleting old identity lease", "err", err)
	}
	var sweep sync.WaitGroup
	defer sweep.Wait()
	sweep.Go(func() { k.deleteDeadLeases(ctx) })
	renew := time.NewTicker(k.Duration / 3)
	defer renew.Stop()
	for {
		if err := k.renew(ctx); err != nil && ctx.Err() == nil {
			k.Logger.Warn("renewing identity lease", "lease", k.Namespace+"/"+k.Name, "err", err)
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := leases.Delete(dctx, k.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				k.Logger.Warn("deleting identity lease on shutdown", "lease", k.Namespace+"/"+k.Name, "err", err)
			}
			return
		case <-renew.C:
		case <-k.RenewNow: // a nil channel never receives
		}
	}
}

// deleteDeadLeases deletes other sidecars' Leases that nobody renews, so that no dead peer
// lingers. It notes each Lease's holder and renew time and, twice the Lease's duration
// later on this machine's monotonic clock, deletes it if both are unchanged. It never
// compares a peer's renew time, written by the peer's clock, with this machine's clock:
// a live peer's Lease is kept whatever the skew between the two clocks.
func (k *LeaseKeeper) deleteDeadLeases(ctx context.Context) {
	leases := k.Client.CoordinationV1().Leases(k.Namespace)
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: LeaseLabel + "=" + LeaseLabelValue})
	if err != nil {
		if ctx.Err() == nil {
			k.Logger.Warn("listing identity leases to remove dead ones", "err", err)
		}
		return
	}
	start := time.Now()
	seen := slices.DeleteFunc(list.Items, func(l coordinationv1.Lease) bool { return l.Name == k.Name })
	deadline := func(l *coordinationv1.Lease) time.Time { return start.Add(2 * leaseDuration(l, k.Duration)) }
	slices.SortFunc(seen, func(a, b coordinationv1.Lease) int { return deadline(&a).Compare(deadline(&b)) })
	for _, before := range seen {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(deadline(&before))):
		}
		now, err := leases.Get(ctx, before.Name, metav1.GetOptions{})
		if err != nil || !sameRenewal(&before, now) {
			continue // gone, or renewed: alive
		}
		// The preconditions let a renewal that races with us win.
		pre := &metav1.Preconditions{UID: &now.UID}
		if now.ResourceVersion != "" {
			pre.ResourceVersion = &now.ResourceVersion
		}
		if err := leases.Delete(ctx, before.Name, metav1.DeleteOptions{Preconditions: pre}); err == nil {
			k.Logger.Info("deleted a peer lease nobody renews", "lease", before.Name)
		}
	}
}

// leaseDuration is the Lease's duration, def when it has none.
func leaseDuration(l *coordinationv1.Lease, def time.Duration) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return def
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

// sameRenewal reports whether b is a, not renewed since: same object, holder and renew time.
func sameRenewal(a, b *coordinationv1.Lease) bool {
	return a.UID == b.UID && ptrEqual(a.Spec.HolderIdentity, b.Spec.HolderIdentity) &&
		(a.Spec.RenewTime == nil) == (b.Spec.RenewTime == nil) &&
		(a.Spec.RenewTime == nil || a.Spec.RenewTime.Equal(b.Spec.RenewTime))
}

func (k *LeaseKeeper) renew(ctx context.Context) error {
	leases := k.Client.CoordinationV1().Leases(k.Namespace)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, k.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:        k.Name,
				Namespace:   k.Namespace,
				Labels:      map[string]string{LeaseLabel: LeaseLabelValue},
				Annotations: k.annotations(nil),
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(k.Holder()),
				LeaseDurationSeconds: ptr.To(k.durationSeconds()),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.HolderIdentity = ptr.To(k.Holder())
	l.Spec.RenewTime = &now
	l.Spec.LeaseDurationSeconds = ptr.To(k.durationSeconds())
	l.Annotations = k.annotations(l.Annotations)
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// annotations sets the sidecar's annotations in a (a new map when nil).
func (k *LeaseKeeper) annotations(a map[string]string) map[string]string {
	if a == nil {
		a = map[string]string{}
	}
	a[AddressAnnotation] = k.Address
	if k.Discovery != nil {
		a[DiscoveryAnnotation] = k.Discovery()
	}
	return a
}

// durationSeconds is Duration in whole seconds, at least 1 and at most a day.
func (k *LeaseKeeper) durationSeconds() int32 {
	s := min(max(k.Duration/time.Second, 1), 24*3600)
	return int32(s)
}

// peerFromLease reads a peer from a sidecar's Lease; ok is false for a Lease that is not
// a peer's (another label, no holder).
func peerFromLease(l *coordinationv1.Lease) (mvproxy.PeerInfo, bool, error) {
	if l.Labels[LeaseLabel] != LeaseLabelValue || l.Spec.HolderIdentity == nil {
		return mvproxy.PeerInfo{}, false, nil
	}
	addr := l.Annotations[AddressAnnotation]
	if err := validAddress(addr); err != nil {
		return mvproxy.PeerInfo{}, true, fmt.Errorf("peer lease %s/%s: address annotation %s=%q: %w", l.Namespace, l.Name, AddressAnnotation, addr, err)
	}
	return mvproxy.PeerInfo{ID: l.Name, Address: addr, Holder: *l.Spec.HolderIdentity}, true, nil
}

// validAddress accepts host:port with a non-empty host and a port in 1..65535.
func validAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("no host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}
