package kubeapi

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kplug/kplug/imagecred"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestKubeServiceAccountsCaching checks the client-go ServiceAccounts' caches; what the
// real API server does with its requests is tested in test/e2e.
func TestKubeServiceAccountsCaching(t *testing.T) {
	client := fake.NewClientset(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "puller", UID: "sa-uid", Annotations: map[string]string{"a": "1"},
	}})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // the fake clientset answers in the caller's goroutine
	clock := func() time.Time { return now }
	var issued []*authenticationv1.TokenRequest
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		issued = append(issued, tr.DeepCopy())
		tr.Status = authenticationv1.TokenRequestStatus{
			Token:               "token-" + string(rune('0'+len(issued))),
			ExpirationTimestamp: metav1.NewTime(now.Add(time.Hour)),
		}
		return true, tr, nil
	})
	sas := NewServiceAccounts(client, Options{LookupTTL: time.Minute, Now: clock})
	ctx := t.Context()

	gets := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" {
				n++
			}
		}
		return n
	}
	for range 2 {
		sa, err := sas.ServiceAccount(ctx, "ns", "puller")
		if err != nil || sa.UID != "sa-uid" || sa.Annotations["a"] != "1" {
			t.Fatalf("ServiceAccount = %+v, %v", sa, err)
		}
	}
	if gets() != 1 {
		t.Errorf("%d GETs within the lookup TTL, want 1", gets())
	}
	now = now.Add(time.Minute)
	if _, err := sas.ServiceAccount(ctx, "ns", "puller"); err != nil || gets() != 2 {
		t.Errorf("after the TTL: %d GETs, %v; want 2", gets(), err)
	}

	req := imagecred.TokenRequest{Namespace: "ns", ServiceAccount: "puller", ServiceAccountUID: "sa-uid", Audience: "aud", PodName: "pod", PodUID: "pod-uid"}
	token := func() string {
		tok, err := sas.Token(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	first := token()
	now = now.Add(47 * time.Minute) // before 80 % of the hour
	if again := token(); again != first || len(issued) != 1 {
		t.Errorf("token %q after 47m (%d requests), want %q reused", again, len(issued), first)
	}
	now = now.Add(time.Minute) // 48m: 80 % reached
	if renewed := token(); renewed == first || len(issued) != 2 {
		t.Errorf("token %q after 48m (%d requests), want a new one", renewed, len(issued))
	}
	want := &authenticationv1.TokenRequest{
		ObjectMeta: metav1.ObjectMeta{UID: "sa-uid"},
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:      []string{"aud"},
			BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "pod", UID: "pod-uid"},
		},
	}
	if diff := cmp.Diff(want, issued[0]); diff != "" {
		t.Errorf("TokenRequest (-want +got):\n%s", diff)
	}
}
