package mvproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Lease labels and annotations by which sidecars find each other.
const (
	// LeaseLabel marks a sidecar's identity Lease; its value is LeaseLabelValue.
	LeaseLabel      = "peerproxy.kplug.io/identity"
	LeaseLabelValue = "kplug-peerproxy"
	// AddressAnnotation holds the host:port where the sidecar serves its peers.
	AddressAnnotation = "peerproxy.kplug.io/address"
)

// LeaseKeeper keeps the sidecar's identity Lease: it removes a leftover Lease of its own
// name and expired Leases of other sidecars at start, renews its own, and deletes it when
// Run ends. Its fields must not change once Run is called.
type LeaseKeeper struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	Address   string // host:port
	Duration  time.Duration
	Logger    *slog.Logger

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
	k.cleanup(ctx)
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
		}
	}
}

// cleanup deletes a Lease of this name left by an earlier run and other sidecars' expired
// Leases, so that peers see a restart as delete-then-add and no dead peer lingers.
func (k *LeaseKeeper) cleanup(ctx context.Context) {
	leases := k.Client.CoordinationV1().Leases(k.Namespace)
	if err := leases.Delete(ctx, k.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		k.Logger.Debug("deleting old identity lease", "err", err)
	}
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: LeaseLabel + "=" + LeaseLabelValue})
	if err != nil {
		k.Logger.Warn("listing identity leases to remove expired ones", "err", err)
		return
	}
	now := time.Now()
	for _, l := range list.Items {
		if l.Name == k.Name || !leaseExpired(&l, now) {
			continue
		}
		uid := l.UID
		err := leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err == nil {
			k.Logger.Info("deleted expired peer lease", "lease", l.Name)
		}
	}
}

func leaseExpired(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second).Before(now)
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
				Annotations: map[string]string{AddressAnnotation: k.Address},
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
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AddressAnnotation] = k.Address
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// durationSeconds is Duration in whole seconds, at least 1 and at most a day.
func (k *LeaseKeeper) durationSeconds() int32 {
	s := min(max(k.Duration/time.Second, 1), 24*3600)
	return int32(s)
}

// peerFromLease reads a peer from a sidecar's Lease; ok is false for a Lease that is not
// a peer's (another label, no holder).
func peerFromLease(l *coordinationv1.Lease) (PeerInfo, bool, error) {
	if l.Labels[LeaseLabel] != LeaseLabelValue || l.Spec.HolderIdentity == nil {
		return PeerInfo{}, false, nil
	}
	addr := l.Annotations[AddressAnnotation]
	if err := validAddress(addr); err != nil {
		return PeerInfo{}, true, fmt.Errorf("peer lease %s/%s: address annotation %s=%q: %w", l.Namespace, l.Name, AddressAnnotation, addr, err)
	}
	return PeerInfo{ID: l.Name, Address: addr, Holder: *l.Spec.HolderIdentity}, true, nil
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
