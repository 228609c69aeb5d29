//go:build unix

package imagecred

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	kubeletv1 "k8s.io/kubelet/config/v1"
)

func saProvider(f *fixture, response string, cacheType kubeletv1.ServiceAccountTokenCacheType, require bool) kubeletv1.CredentialProvider {
	p := f.provider("p", response)
	p.TokenAttributes = &kubeletv1.ServiceAccountTokenAttributes{
		ServiceAccountTokenAudience: "registry.example",
		CacheType:                   cacheType,
		RequireServiceAccount:       &require,
	}
	if require {
		p.TokenAttributes.RequiredServiceAccountAnnotationKeys = []string{"domain.io/identity"}
	}
	p.TokenAttributes.OptionalServiceAccountAnnotationKeys = []string{"domain.io/optional", "domain.io/absent"}
	return p
}

var pod1 = &Pod{Namespace: "ns", Name: "pod-1", UID: "pod-uid-1", ServiceAccountName: "puller"}

func TestServiceAccountTokenAndAnnotationsReachThePlugin(t *testing.T) {
	f := newFixture(t)
	f.accounts.add("ns", "puller", "sa-uid", map[string]string{"domain.io/identity": "", "domain.io/optional": "o", "unrelated": "x"})
	k := f.keyring(Options{}, saProvider(f, response("Image", "", regAuth), kubeletv1.ServiceAccountServiceAccountTokenCacheType, true))

	got := f.lookup(k, "registry.io/app", pod1)
	want := []Credential{{Key: "registry.io", Provider: "p", AuthConfig: AuthConfig{Username: "u", Password: "p"},
		ServiceAccount: &ServiceAccountCoordinates{UID: "sa-uid", Namespace: "ns", Name: "puller"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("credentials (-want +got):\n%s", diff)
	}
	wantReq := `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"registry.io/app",` +
		`"serviceAccountToken":"token-pod-uid-1-a","serviceAccountAnnotations":{"domain.io/identity":"","domain.io/optional":"o"}}`
	if diff := cmp.Diff([]string{wantReq}, f.requests("p")); diff != "" {
		t.Errorf("plugin requests (-want +got):\n%s", diff)
	}
	wantTR := []TokenRequest{{Namespace: "ns", ServiceAccount: "puller", ServiceAccountUID: "sa-uid", Audience: "registry.example", PodName: "pod-1", PodUID: "pod-uid-1"}}
	if diff := cmp.Diff(wantTR, f.accounts.tokenRequests()); diff != "" {
		t.Errorf("token requests (-want +got):\n%s", diff)
	}
}

func TestServiceAccountRequirements(t *testing.T) {
	for _, tc := range []struct {
		name    string
		require bool
		pod     *Pod
		want    error
		execs   int
		request string // the plugin's request when it ran
	}{
		{name: "required and no pod", require: true, want: ErrNoServiceAccount},
		{name: "required and pod without service account", require: true, pod: &Pod{Namespace: "ns", Name: "p"}, want: ErrNoServiceAccount},
		{name: "required annotation missing", require: true, pod: &Pod{Namespace: "ns", Name: "p", ServiceAccountName: "bare"}, want: ErrRequiredAnnotation},
		{name: "not required and no pod: plain request", execs: 1,
			request: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"registry.io/app"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.accounts.add("ns", "bare", "bare-uid", nil)
			k := f.keyring(Options{}, saProvider(f, response("Image", "", regAuth), kubeletv1.ServiceAccountServiceAccountTokenCacheType, tc.require))
			creds, err := k.Lookup(t.Context(), "registry.io/app", tc.pod)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
			if tc.want != nil && len(creds) != 0 {
				t.Errorf("credentials %v despite %v", creds, tc.want)
			}
			if n := f.execs("p"); n != tc.execs {
				t.Errorf("plugin ran %d times, want %d", n, tc.execs)
			}
			if tc.execs == 0 && len(f.accounts.tokenRequests()) != 0 {
				t.Errorf("a token was requested although the plugin was not run")
			}
			if tc.request != "" {
				if diff := cmp.Diff([]string{tc.request}, f.requests("p")); diff != "" {
					t.Errorf("request (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestServiceAccountCacheType(t *testing.T) {
	pod2 := &Pod{Namespace: "ns", Name: "pod-2", UID: "pod-uid-2", ServiceAccountName: "puller"}
	other := &Pod{Namespace: "ns", Name: "pod-3", UID: "pod-uid-3", ServiceAccountName: "other"}
	for _, tc := range []struct {
		cacheType kubeletv1.ServiceAccountTokenCacheType
		execs     int
		tokens    int
	}{
		// One SA, two pods: one exec; the second pod's hit needs no token at all.
		// The other SA is a separate entry. The annotation change is a new key.
		{kubeletv1.ServiceAccountServiceAccountTokenCacheType, 3, 3},
		// Every pod has its own token, so every pod gets its own entry.
		{kubeletv1.TokenServiceAccountTokenCacheType, 4, 4},
	} {
		t.Run(string(tc.cacheType), func(t *testing.T) {
			f := newFixture(t)
			f.accounts.add("ns", "puller", "sa-uid", map[string]string{"domain.io/identity": "1"})
			f.accounts.add("ns", "other", "other-uid", map[string]string{"domain.io/identity": "1"})
			k := f.keyring(Options{}, saProvider(f, response("Registry", "", regAuth), tc.cacheType, true))
			for _, pod := range []*Pod{pod1, pod2, other} {
				if got := f.lookup(k, "registry.io/app", pod); len(got) != 1 {
					t.Fatalf("%s: %d credentials", pod.Name, len(got))
				}
			}
			f.accounts.add("ns", "puller", "sa-uid", map[string]string{"domain.io/identity": "2"})
			f.lookup(k, "registry.io/app", pod1)
			if n := f.execs("p"); n != tc.execs {
				t.Errorf("plugin ran %d times, want %d", n, tc.execs)
			}
			if n := len(f.accounts.tokenRequests()); n != tc.tokens {
				t.Errorf("%d token requests, want %d", n, tc.tokens)
			}
		})
	}
}

func TestTokenEchoedAsPassword(t *testing.T) {
	echo := response("Image", "", `{"registry.io":{"username":"u","password":"{{index .Request "serviceAccountToken"}}"}}`)
	t.Run("rejected with cacheType ServiceAccount", func(t *testing.T) {
		f := newFixture(t)
		f.accounts.add("ns", "puller", "sa-uid", map[string]string{"domain.io/identity": "1"})
		k := f.keyring(Options{}, saProvider(f, echo, kubeletv1.ServiceAccountServiceAccountTokenCacheType, true))
		for range 2 {
			creds, err := k.Lookup(t.Context(), "registry.io/app", pod1)
			if !errors.Is(err, ErrTokenEchoed) || len(creds) != 0 {
				t.Fatalf("Lookup = %v, %v; want no credentials and %v", creds, err, ErrTokenEchoed)
			}
		}
		if n := f.execs("p"); n != 2 {
			t.Errorf("plugin ran %d times, want 2 (a rejected answer is not cached)", n)
		}
	})
	t.Run("allowed with cacheType Token", func(t *testing.T) {
		f := newFixture(t)
		f.accounts.add("ns", "puller", "sa-uid", map[string]string{"domain.io/identity": "1"})
		k := f.keyring(Options{}, saProvider(f, echo, kubeletv1.TokenServiceAccountTokenCacheType, true))
		got := f.lookup(k, "registry.io/app", pod1)
		if len(got) != 1 || got[0].Password != "token-pod-uid-1-a" {
			t.Errorf("credentials %+v, want the token as password", got)
		}
	})
}

func TestServiceAccountLookupFailure(t *testing.T) {
	f := newFixture(t)
	k := f.keyring(Options{}, saProvider(f, response("Image", "", regAuth), kubeletv1.ServiceAccountServiceAccountTokenCacheType, true))
	_, err := k.Lookup(t.Context(), "registry.io/app", &Pod{Namespace: "ns", Name: "p", ServiceAccountName: "ghost"})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error = %v, want the lookup's error", err)
	}
	if f.execs("p") != 0 {
		t.Error("plugin ran without its service account")
	}
}
