package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kplug/kplug/test/e2e/framework"
)

// TestControlPlane starts two apiservers on one etcd, which differ by one runtime-config
// flag, and checks what later tests rely on: both serve, identities are authenticated as
// themselves, TokenRequest with an audience works, and each server has an identity Lease.
func TestControlPlane(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{
		{},
		{Flags: []string{"--runtime-config=batch/v1=false"}},
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	t.Run("both servers serve, with different resources", func(t *testing.T) {
		for i, wantBatch := range []bool{true, false} {
			client := clientFor(t, cp, cp.Admin, i)
			if _, err := client.Discovery().ServerVersion(); err != nil {
				t.Fatalf("%s: %v", cp.Servers[i].Name, err)
			}
			_, err := client.Discovery().ServerResourcesForGroupVersion("batch/v1")
			if gotBatch := err == nil; gotBatch != wantBatch {
				t.Errorf("%s serves batch/v1: %v, want %v (err %v)", cp.Servers[i].Name, gotBatch, wantBatch, err)
			}
		}
	})

	t.Run("client-certificate and token users are authenticated as themselves", func(t *testing.T) {
		for _, u := range []*framework.User{cp.CertUser, cp.TokenUser, cp.Admin} {
			for i := range cp.Servers {
				review, err := clientFor(t, cp, u, i).AuthenticationV1().SelfSubjectReviews().
					Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("%s on %s: %v", u.Name, cp.Servers[i].Name, err)
				}
				got := review.Status.UserInfo
				if got.Username != u.Name || got.UID != u.UID {
					t.Errorf("%s on %s: authenticated as %q (uid %q)", u.Name, cp.Servers[i].Name, got.Username, got.UID)
				}
				for _, g := range append(u.Groups, "system:authenticated") {
					if !slices.Contains(got.Groups, g) {
						t.Errorf("%s: groups %v lack %s", u.Name, got.Groups, g)
					}
				}
			}
		}
	})

	t.Run("kubectl works with the generated kubeconfig", func(t *testing.T) {
		out, err := cp.Kubectl(ctx, cp.TokenUser, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").CombinedOutput()
		if err != nil || string(out) != "bob" {
			t.Errorf("kubectl auth whoami: %q, %v", out, err)
		}
	})

	t.Run("TokenRequest with an audience", func(t *testing.T) {
		client := clientFor(t, cp, cp.Admin, 0)
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "puller", Namespace: "default"}}
		if _, err := client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "puller", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"registry.example"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claims := jwtClaims(t, tr.Status.Token)
		if diff := cmp.Diff([]any{"registry.example"}, claims["aud"]); diff != "" {
			t.Errorf("token audience (-want +got):\n%s", diff)
		}
		if claims["sub"] != "system:serviceaccount:default:puller" {
			t.Errorf("token subject %v", claims["sub"])
		}
		// The other server, sharing etcd and the signing key, validates the token for that
		// audience, as a registry's TokenReview would.
		review, err := clientFor(t, cp, cp.Admin, 1).AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token, Audiences: []string{"registry.example"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:default:puller" {
			t.Errorf("TokenReview status %+v", review.Status)
		}
	})

	t.Run("each apiserver has an identity Lease", func(t *testing.T) {
		client := clientFor(t, cp, cp.Admin, 0)
		var holders []string
		deadline := time.Now().Add(30 * time.Second)
		for ; time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			leases, err := client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{
				LabelSelector: "apiserver.kubernetes.io/identity=kube-apiserver",
			})
			if err != nil {
				t.Fatal(err)
			}
			holders = holders[:0]
			for _, l := range leases.Items {
				if l.Spec.HolderIdentity != nil {
					holders = append(holders, *l.Spec.HolderIdentity)
				}
			}
			if len(holders) == len(cp.Servers) {
				break
			}
		}
		if len(holders) != len(cp.Servers) || holders[0] == holders[1] {
			t.Errorf("identity lease holders %v, want %d distinct", holders, len(cp.Servers))
		}
	})
}

// TestStopLeavesNothingRunning checks that a stopped control plane's processes are gone
// and that a stopped apiserver no longer answers.
func TestStopLeavesNothingRunning(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	s := cp.Servers[0]
	if !s.Running() {
		t.Fatal("apiserver not running after start")
	}
	cp.Stop()
	if s.Running() {
		t.Error("apiserver still running after Stop")
	}
	if _, err := clientFor(t, cp, cp.Admin, 0).Discovery().ServerVersion(); err == nil {
		t.Error("stopped apiserver still answers")
	}
	cp.Stop() // a second Stop, as the test cleanup does, is harmless
}

func clientFor(t testing.TB, cp *framework.ControlPlane, u *framework.User, i int) *kubernetes.Clientset {
	t.Helper()
	cfg := cp.RESTConfig(u, i)
	cfg.Timeout = 30 * time.Second
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func jwtClaims(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	return claims
}
