package sidecar

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func testLease(name, holder string, renew time.Time, labels map[string]string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: labels, UID: types.UID("uid-" + name)},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), RenewTime: ptr.To(metav1.NewMicroTime(renew)), LeaseDurationSeconds: ptr.To(int32(30))},
	}
}

var sidecarLabels = map[string]string{LeaseLabel: LeaseLabelValue}

func TestLeaseKeeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		longLease := testLease("dead-peer-with-a-day-long-lease", "y", time.Now().Add(-time.Hour), sidecarLabels)
		longLease.Spec.LeaseDurationSeconds = ptr.To(int32(24 * 3600))
		client := fake.NewClientset(
			testLease("me", "me_previous-run", time.Now(), sidecarLabels),
			testLease("dead-peer", "x", time.Now().Add(-time.Hour), sidecarLabels),
			longLease,
			testLease("apiserver-abc", "z", time.Now().Add(-time.Hour), map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver"}),
		)
		leases := client.CoordinationV1().Leases("kube-system")
		k := &LeaseKeeper{Client: client, Namespace: "kube-system", Name: "me", Address: "127.0.0.1:6444", Duration: 30 * time.Second, Logger: testLogger()}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); k.Run(runCtx) }()

		synctest.Wait()
		l, err := leases.Get(ctx, "me", metav1.GetOptions{})
		if err != nil || *l.Spec.HolderIdentity != k.Holder() {
			t.Fatalf("own lease %+v, %v; want holder %s", l, err, k.Holder())
		}
		if l.Annotations[AddressAnnotation] != "127.0.0.1:6444" || l.Labels[LeaseLabel] != LeaseLabelValue || !strings.HasPrefix(k.Holder(), "me_") || *l.Spec.LeaseDurationSeconds != 30 {
			t.Errorf("own lease %+v, holder %s", l, k.Holder())
		}
		// A dead peer's Lease goes once it was seen unrenewed for twice its duration,
		// whatever the duration of others; an apiserver's Lease is never touched.
		time.Sleep(61 * time.Second)
		synctest.Wait()
		for name, wantGone := range map[string]bool{"dead-peer": true, longLease.Name: false, "apiserver-abc": false, "me": false} {
			_, err := leases.Get(ctx, name, metav1.GetOptions{})
			if gone := apierrors.IsNotFound(err); gone != wantGone {
				t.Errorf("lease %s deleted: %v, want %v", name, gone, wantGone)
			}
		}
		cancel()
		<-done
		if _, err := leases.Get(ctx, "me", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("own lease after shutdown: %v, want deleted", err)
		}
	})
}

func TestPeerFromLease(t *testing.T) {
	t.Parallel()
	mk := func(addr string, holder *string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "kube-system", Labels: map[string]string{LeaseLabel: LeaseLabelValue},
				Annotations: map[string]string{AddressAnnotation: addr}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: holder},
		}
	}
	tests := []struct {
		name    string
		lease   *coordinationv1.Lease
		ok      bool
		wantErr string
	}{
		{"good", mk("10.0.0.1:6444", ptr.To("h")), true, ""},
		{"ipv6", mk("[::1]:6444", ptr.To("h")), true, ""},
		{"no holder", mk("10.0.0.1:6444", nil), false, ""},
		{"no port", mk("10.0.0.1", ptr.To("h")), true, `peer lease kube-system/p: address annotation peerproxy.kplug.io/address="10.0.0.1": address 10.0.0.1: missing port in address`},
		{"port zero", mk("10.0.0.1:0", ptr.To("h")), true, `peer lease kube-system/p: address annotation peerproxy.kplug.io/address="10.0.0.1:0": bad port "0"`},
		{"no host", mk(":6444", ptr.To("h")), true, `peer lease kube-system/p: address annotation peerproxy.kplug.io/address=":6444": no host`},
	}
	for _, tt := range tests {
		_, ok, err := peerFromLease(tt.lease)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if ok != tt.ok || gotErr != tt.wantErr {
			t.Errorf("%s: ok %v, error %q; want %v, %q", tt.name, ok, gotErr, tt.ok, tt.wantErr)
		}
	}
}
