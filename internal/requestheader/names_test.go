package requestheader

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// published is the ConfigMap kube-apiserver writes with kubeadm's names, changed by kv
// (key, value, ...).
func published(kv ...string) *corev1.ConfigMap {
	d := map[string]string{
		"requestheader-client-ca-file":       "-----BEGIN CERTIFICATE-----",
		"requestheader-username-headers":     `["X-Remote-User"]`,
		"requestheader-group-headers":        `["X-Remote-Group"]`,
		"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
		"requestheader-uid-headers":          `["X-Remote-Uid"]`,
	}
	for i := 0; i < len(kv); i += 2 {
		d[kv[i]] = kv[i+1]
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: Namespace}, Data: d}
}

// TestSecurityCheckRequestHeaderNames: a front proxy removes its names from clients'
// requests and sets the first of each; kube-apiserver believes every name it publishes.
// A published name the proxy does not remove lets a client assert any identity through
// it (issue 27 N2 review for peerproxy; review of N2, F2, for signature-proxy, whose
// names are configurable); a name the proxy sets that kube-apiserver does not read loses
// the user's identity. Both are refused, saying which flag and names.
func TestSecurityCheckRequestHeaderNames(t *testing.T) {
	t.Parallel()
	proxy := Proxy{Name: "the proxy", Server: "kube-apiserver"}
	wider := Names{
		Username: []string{"X-Remote-User", "X-User"}, Group: []string{"X-Remote-Group", "X-Forwarded-Groups"},
		UID: []string{"X-Remote-Uid"}, ExtraPrefix: []string{"X-Remote-Extra-", "X-Extra-"},
	}
	for _, tt := range []struct {
		name string
		cm   *corev1.ConfigMap // nil: none
		ours Names
		want error
	}{
		{"kubeadm's names", published(), Default, nil},
		{"no UID header", published("requestheader-uid-headers", ""), Default, nil},
		{"names in another case", published("requestheader-username-headers", `["x-remote-user"]`), Default, nil},
		{"names published in two cases", published("requestheader-username-headers", `["X-Remote-User","x-remote-user"]`), Default, nil},
		{"no front proxy trusted", published("requestheader-client-ca-file", "", "requestheader-group-headers", `["X-Groups"]`), Default, nil},
		{"no ConfigMap", nil, Default, ErrNotPublished},
		{"a second group header", published("requestheader-group-headers", `["X-Remote-Group","X-Groups","x-groups"]`), Default,
			&MismatchError{Proxy: proxy, Flag: "requestheader-group-headers", Names: []string{"X-Remote-Group", "X-Groups", "x-groups"}, Want: []string{"X-Remote-Group"}, Unknown: []string{"X-Groups"}}},
		{"another user header first", published("requestheader-username-headers", `["X-User","X-Remote-User"]`), Default,
			&MismatchError{Proxy: proxy, Flag: "requestheader-username-headers", Names: []string{"X-User", "X-Remote-User"}, Want: []string{"X-Remote-User"}, Unknown: []string{"X-User"}}},
		{"another extra prefix", published("requestheader-extra-headers-prefix", `["X-Remote-Extra-","X-Extra-"]`), Default,
			&MismatchError{Proxy: proxy, Flag: "requestheader-extra-headers-prefix", Names: []string{"X-Remote-Extra-", "X-Extra-"}, Want: []string{"X-Remote-Extra-"}, Unknown: []string{"X-Extra-"}}},
		{"another UID header", published("requestheader-uid-headers", `["X-Uid"]`), Default,
			&MismatchError{Proxy: proxy, Flag: "requestheader-uid-headers", Names: []string{"X-Uid"}, Want: []string{"X-Remote-Uid"}, Unknown: []string{"X-Uid"}}},
		{"no user header", published("requestheader-username-headers", `[]`), Default,
			&MismatchError{Proxy: proxy, Flag: "requestheader-username-headers", Names: []string{}, Want: []string{"X-Remote-User"}}},

		// Configured names: the proxy removes them all and sets the first.
		{"every published name removed", published("requestheader-group-headers", `["X-Forwarded-Groups","X-Remote-Group"]`, "requestheader-username-headers", `["x-user","X-Remote-User"]`), wider, nil},
		{"fewer published than removed", published(), wider, nil},
		{"a published prefix under one removed", published("requestheader-extra-headers-prefix", `["X-Remote-Extra-","X-Remote-Extra-Corp-"]`), Default, nil},
		{"a published prefix over one removed", published("requestheader-extra-headers-prefix", `["X-Remote-"]`), Default,
			&MismatchError{Proxy: proxy, Flag: "requestheader-extra-headers-prefix", Names: []string{"X-Remote-"}, Want: []string{"X-Remote-Extra-"}, Unknown: []string{"X-Remote-"}}},
		{"the name set not published", published("requestheader-group-headers", `["X-Forwarded-Groups"]`), wider,
			&MismatchError{Proxy: proxy, Flag: "requestheader-group-headers", Names: []string{"X-Forwarded-Groups"}, Want: []string{"X-Remote-Group", "X-Forwarded-Groups"}}},
		{"the UID set not published while another is", published("requestheader-uid-headers", `["X-Other-Uid"]`), Names{Username: Default.Username, Group: Default.Group, ExtraPrefix: Default.ExtraPrefix, UID: []string{"X-Remote-Uid", "X-Other-Uid"}},
			&MismatchError{Proxy: proxy, Flag: "requestheader-uid-headers", Names: []string{"X-Other-Uid"}, Want: []string{"X-Remote-Uid", "X-Other-Uid"}}},
		{"no group names of ours", published(), Names{Username: Default.Username, ExtraPrefix: Default.ExtraPrefix, UID: Default.UID},
			&MismatchError{Proxy: proxy, Flag: "requestheader-group-headers", Names: []string{"X-Remote-Group"}, Unknown: []string{"X-Remote-Group"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client := fake.NewClientset()
			if tt.cm != nil {
				client = fake.NewClientset(tt.cm)
			}
			err := Check(t.Context(), client, tt.ours, proxy)
			var got, want *MismatchError
			if errors.As(tt.want, &want) {
				if !errors.As(err, &got) {
					t.Fatalf("got %v, want %v", err, want)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			} else if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestMismatchErrorMessages: what an administrator reads.
func TestMismatchErrorMessages(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  *MismatchError
		want string
	}{
		{&MismatchError{Proxy: Proxy{Name: "the sidecar", Server: "the local kube-apiserver"}, Flag: "requestheader-group-headers", Names: []string{"X-Remote-Group", "X-Groups"}, Want: []string{"X-Remote-Group"}, Unknown: []string{"X-Groups"}},
			"the request-header names in ConfigMap kube-system/extension-apiserver-authentication have --requestheader-group-headers=X-Remote-Group,X-Groups, but the sidecar sets and removes only X-Remote-Group: " +
				"a client could assert any identity through X-Groups if the local kube-apiserver reads it. " +
				"The ConfigMap keeps every name any kube-apiserver of the cluster ever published: run each with --requestheader-group-headers=X-Remote-Group, " +
				"then remove X-Groups from the ConfigMap (kubectl -n kube-system edit configmap extension-apiserver-authentication) or delete the ConfigMap, and the kube-apiservers write their current names back"},
		{&MismatchError{Proxy: Proxy{Name: "the sidecar", Server: "the local kube-apiserver"}, Flag: "requestheader-username-headers", Names: []string{}, Want: []string{"X-Remote-User"}},
			"the request-header names in ConfigMap kube-system/extension-apiserver-authentication have --requestheader-username-headers=, without X-Remote-User, which the sidecar sets: " +
				"kube-apiserver would not believe the users it forwards; run kube-apiserver with --requestheader-username-headers=X-Remote-User"},
		{&MismatchError{Proxy: Proxy{Name: "kplug signature-proxy", Server: "kube-apiserver", Configurable: true}, Flag: "requestheader-group-headers", Names: []string{"X-Remote-Group", "X-Forwarded-Groups", "X-Groups"}, Want: []string{"X-Remote-Group", "X-Forwarded-Groups"}, Unknown: []string{"X-Groups"}},
			"the request-header names in ConfigMap kube-system/extension-apiserver-authentication have --requestheader-group-headers=X-Remote-Group,X-Forwarded-Groups,X-Groups, " +
				"but kplug signature-proxy sets X-Remote-Group and removes only X-Remote-Group,X-Forwarded-Groups: a client could assert any identity through X-Groups if kube-apiserver reads it. " +
				"The ConfigMap keeps every name any kube-apiserver of the cluster ever published: run each with --requestheader-group-headers=X-Remote-Group,X-Forwarded-Groups, " +
				"then remove X-Groups from the ConfigMap (kubectl -n kube-system edit configmap extension-apiserver-authentication) or delete the ConfigMap, and the kube-apiservers write their current names back; " +
				"or run kplug signature-proxy with --requestheader-group-headers=X-Remote-Group,X-Forwarded-Groups,X-Groups, so that it removes them all"},
		{&MismatchError{Proxy: Proxy{Name: "kplug signature-proxy", Server: "kube-apiserver", Configurable: true}, Flag: "requestheader-group-headers", Names: []string{"X-Groups"}, Want: []string{"X-Remote-Group", "X-Groups"}},
			"the request-header names in ConfigMap kube-system/extension-apiserver-authentication have --requestheader-group-headers=X-Groups, without X-Remote-Group, which kplug signature-proxy sets: " +
				"kube-apiserver would not believe the users it forwards; run kube-apiserver with --requestheader-group-headers=X-Remote-Group,X-Groups, " +
				"or kplug signature-proxy with --requestheader-group-headers listing first a name kube-apiserver reads"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got  %q\nwant %q", got, tt.want)
		}
	}
}
