package imagecred

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	kubeletv1 "k8s.io/kubelet/config/v1"

	"github.com/kplug/kplug/imagecred/plugin"
	"github.com/kplug/kplug/internal/testkit/poll"
)

// recorder is an in-process plugin that answers with resp and records its requests.
type recorder struct {
	mu   sync.Mutex
	reqs []plugin.Request
	resp *plugin.Response
	err  error
	hold chan struct{} // when set, answers only once closed
}

func (r *recorder) plugin(_ context.Context, req *plugin.Request) (*plugin.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, *req)
	hold := r.hold
	r.mu.Unlock()
	if hold != nil {
		<-hold
	}
	return r.resp, r.err
}

func (r *recorder) requests() []plugin.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]plugin.Request(nil), r.reqs...)
}

var robot = map[string]AuthConfig{"registry.io": {Username: "robot", Password: "p"}}

func TestFuncProvider(t *testing.T) {
	r := &recorder{resp: &plugin.Response{CacheKeyType: plugin.CacheImage, Auth: robot}}
	p := FuncProvider(r.plugin)
	sa := &ServiceAccountRequest{Namespace: "ns", Name: "sa", UID: "uid", Annotations: map[string]string{"a": "1"}, Token: "tok"}
	for _, req := range []*Request{{Image: "registry.io/app"}, {Image: "registry.io/app", ServiceAccount: sa}} {
		resp, err := p.Provide(t.Context(), req)
		if err != nil || !cmp.Equal(resp.Auth, robot) {
			t.Errorf("Provide = %+v, %v", resp, err)
		}
	}
	// What a binary would read on stdin: the image, and the token and annotations.
	want := []plugin.Request{
		{Image: "registry.io/app", APIVersion: APIVersionV1},
		{Image: "registry.io/app", APIVersion: APIVersionV1, ServiceAccountToken: "tok", ServiceAccountAnnotations: map[string]string{"a": "1"}},
	}
	if diff := cmp.Diff(want, r.requests()); diff != "" {
		t.Errorf("plugin requests (-want +got):\n%s", diff)
	}

	// Its answers are checked as a binary's are.
	for _, tc := range []struct {
		resp *plugin.Response
		want string
	}{
		{&plugin.Response{CacheKeyType: "image"}, `the plugin did not return a valid cacheKeyType: "image"`},
		{nil, "the plugin returned no response"},
	} {
		r.resp = tc.resp
		if _, err := p.Provide(t.Context(), &Request{Image: "registry.io/app"}); err == nil || err.Error() != tc.want {
			t.Errorf("Provide with %+v: %v, want %s", tc.resp, err, tc.want)
		}
	}
}

func TestWithCacheHitSaysWhatIsLeft(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ttl := 10 * time.Minute
	r := &recorder{resp: &plugin.Response{CacheKeyType: plugin.CacheRegistry, CacheDuration: &ttl, Auth: robot}}
	p := WithCache(FuncProvider(r.plugin), CacheOptions{Provider: "p", Now: clk.now})
	if _, err := p.Provide(t.Context(), &Request{Image: "registry.io/a"}); err != nil {
		t.Fatal(err)
	}
	clk.advance(4 * time.Minute)
	got, err := p.Provide(t.Context(), &Request{Image: "registry.io/b"})
	left := 6 * time.Minute
	want := &Response{CacheKeyType: plugin.CacheRegistry, CacheDuration: &left, Auth: robot}
	if err != nil || !cmp.Equal(want, got) {
		t.Errorf("cache hit = %+v, %v; want %+v", got, err, want)
	}
	if n := len(r.requests()); n != 1 {
		t.Errorf("plugin called %d times, want 1", n)
	}
}

func TestWithServiceAccountToken(t *testing.T) {
	accounts := newFakeAccounts()
	echo := &plugin.Response{CacheKeyType: plugin.CacheImage, Auth: map[string]AuthConfig{"registry.io": {Username: "u", Password: "token-pod-uid-a"}}}
	sa := &ServiceAccountRequest{Namespace: "ns", Name: "sa", UID: "sa-uid", PodName: "pod", PodUID: "pod-uid"}
	for _, tc := range []struct {
		cacheType kubeletv1.ServiceAccountTokenCacheType
		wantErr   error
	}{
		{kubeletv1.ServiceAccountServiceAccountTokenCacheType, ErrTokenEchoed},
		{kubeletv1.TokenServiceAccountTokenCacheType, nil},
	} {
		t.Run(string(tc.cacheType), func(t *testing.T) {
			*accounts = *newFakeAccounts()
			r := &recorder{resp: echo}
			p := WithServiceAccountToken(FuncProvider(r.plugin), ServiceAccountTokenOptions{
				Audience: "aud", CacheType: tc.cacheType, ServiceAccounts: accounts,
			})
			req := &Request{Image: "registry.io/app", ServiceAccount: sa}
			if _, err := p.Provide(t.Context(), req); !errors.Is(err, tc.wantErr) {
				t.Errorf("Provide: %v, want %v", err, tc.wantErr)
			}
			if got := r.requests(); len(got) != 1 || got[0].ServiceAccountToken != "token-pod-uid-a" {
				t.Errorf("plugin requests %+v, want one with the token", got)
			}
			if req.ServiceAccount.Token != "" {
				t.Error("the caller's request was modified")
			}
			wantTR := []TokenRequest{{Namespace: "ns", ServiceAccount: "sa", ServiceAccountUID: "sa-uid", Audience: "aud", PodName: "pod", PodUID: "pod-uid"}}
			if diff := cmp.Diff(wantTR, accounts.tokenRequests()); diff != "" {
				t.Errorf("token requests (-want +got):\n%s", diff)
			}
		})
	}
	// A request without a service account goes through untouched, and asks for no token.
	*accounts = *newFakeAccounts()
	r := &recorder{resp: echo}
	p := WithServiceAccountToken(FuncProvider(r.plugin), ServiceAccountTokenOptions{Audience: "aud", ServiceAccounts: accounts})
	if _, err := p.Provide(t.Context(), &Request{Image: "registry.io/app"}); err != nil || len(accounts.tokenRequests()) != 0 {
		t.Errorf("without a service account: %v, %d token requests", err, len(accounts.tokenRequests()))
	}
}

// With cacheType ServiceAccount the run is shared per cache entry, which is per service
// account: concurrent pulls by two pods of one account run the plugin once, with one token.
func TestServiceAccountCacheTypeSharesOneRunPerAccount(t *testing.T) {
	accounts := newFakeAccounts()
	r := &recorder{resp: &plugin.Response{CacheKeyType: plugin.CacheImage, Auth: robot}, hold: make(chan struct{})}
	p := WithCache(WithServiceAccountToken(FuncProvider(r.plugin), ServiceAccountTokenOptions{
		Audience: "aud", CacheType: kubeletv1.ServiceAccountServiceAccountTokenCacheType, ServiceAccounts: accounts,
	}), CacheOptions{Provider: "p"})
	var wg sync.WaitGroup
	for _, pod := range []string{"pod-1", "pod-2"} {
		wg.Go(func() {
			sa := &ServiceAccountRequest{Namespace: "ns", Name: "sa", UID: "sa-uid", PodName: pod, PodUID: types.UID("uid-" + pod)}
			if _, err := p.Provide(t.Context(), &Request{Image: "registry.io/app", ServiceAccount: sa}); err != nil {
				t.Error(err)
			}
		})
	}
	key, _ := cacheKey("registry.io/app", mustScope(t, &ServiceAccountRequest{Namespace: "ns", Name: "sa", UID: "sa-uid"}))
	poll.Until(t, "both pods in one run", func() bool { return p.(*cachingProvider).flights.Waiters(key) == 2 })
	close(r.hold)
	wg.Wait()
	if n, tokens := len(r.requests()), len(accounts.tokenRequests()); n != 1 || tokens != 1 {
		t.Errorf("%d plugin runs and %d token requests for two pods of one account, want 1 and 1", n, tokens)
	}
}

func mustScope(t *testing.T, sa *ServiceAccountRequest) string {
	t.Helper()
	s, err := scopeKey(sa)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDockerHelperGet(t *testing.T) {
	hub := &recorder{resp: &plugin.Response{CacheKeyType: plugin.CacheGlobal, Auth: map[string]AuthConfig{"https://index.docker.io/v1/": {Username: "hub", Password: "h"}}}}
	broken := &recorder{err: errors.New("registry said no")}
	k := NewKeyring(
		KeyringEntry{Config: kubeletv1.CredentialProvider{Name: "hub", MatchImages: []string{"docker.io"}}, Provider: FuncProvider(hub.plugin)},
		KeyringEntry{Config: kubeletv1.CredentialProvider{Name: "broken", MatchImages: []string{"registry.io"}}, Provider: FuncProvider(broken.plugin)},
	)
	for _, tc := range []struct {
		in, out, err string
		providers    string // the providers' failures a not-found error carries
	}{
		{in: "https://index.docker.io/v1/\n", out: `{"ServerURL":"https://index.docker.io/v1/","Username":"hub","Secret":"h"}` + "\n"},
		{in: "quay.io", out: "credentials not found in native keychain\n", err: "credentials not found in native keychain"},
		{in: "registry.io\n", out: "credentials not found in native keychain\n", err: "credentials not found in native keychain",
			providers: `imagecred: provider "broken" for image "registry.io": registry said no`},
		{in: "\n", err: "no server URL on stdin"},
	} {
		var out bytes.Buffer
		err := k.DockerHelperGet(t.Context(), strings.NewReader(tc.in), &out)
		if out.String() != tc.out || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("get %q: %q, %v; want %q, %s", tc.in, out.String(), err, tc.out, tc.err)
		}
		var notFound *CredentialsNotFoundError
		if errors.As(err, &notFound) && (notFound.Err == nil) != (tc.providers == "") ||
			notFound != nil && notFound.Err != nil && notFound.Err.Error() != tc.providers {
			t.Errorf("get %q: providers' failures %v, want %q", tc.in, notFound.Err, tc.providers)
		}
	}
}

func TestDockerHelperList(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cache, err := NewDirCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := DockerHelperList(cache, now, &out); err != nil || out.String() != "{}\n" {
		t.Errorf("an empty cache: %q, %v", out.String(), err)
	}
	cache.Put("ecr", "k1", CacheEntry{ExpiresAt: now.Add(time.Hour), Auth: map[string]AuthConfig{
		"123.dkr.ecr.eu-west-1.amazonaws.com": {Username: "AWS", Password: "p"},
		"*.dkr.ecr.*.amazonaws.com":           {Username: "AWS", Password: "p"}, // names no server
	}})
	cache.Put("hub", "k2", CacheEntry{ExpiresAt: now.Add(-time.Second), Auth: map[string]AuthConfig{ // expired
		"https://index.docker.io/v1/": {Username: "hub", Password: "h"},
	}})
	cache.Put("a", "k3", CacheEntry{ExpiresAt: now.Add(time.Minute), Auth: map[string]AuthConfig{"registry.io": {Username: "old", Password: "o"}}})
	cache.Put("b", "k4", CacheEntry{ExpiresAt: now.Add(2 * time.Minute), Auth: map[string]AuthConfig{"registry.io": {Username: "new", Password: "n"}}})
	out.Reset()
	want := `{"123.dkr.ecr.eu-west-1.amazonaws.com":"AWS","registry.io":"new"}` + "\n"
	if err := DockerHelperList(cache, now, &out); err != nil || out.String() != want {
		t.Errorf("list = %q, %v; want %q", out.String(), err, want)
	}
	out.Reset()
	if err := DockerHelperList(nil, now, &out); err != nil || out.String() != "{}\n" {
		t.Errorf("no cache: %q, %v", out.String(), err)
	}
}

func TestDockerHelperReadOnly(t *testing.T) {
	for _, action := range []string{"store", "erase"} {
		var out bytes.Buffer
		err := DockerHelperReadOnly(action, strings.NewReader(`{"ServerURL":"registry.io","Username":"u","Secret":"s3cret"}`), &out)
		want := `"` + action + `" is not supported: this credential helper is read-only: its credentials come from kubelet credential provider plugins`
		if !errors.Is(err, ErrHelperReadOnly) || err.Error() != want || out.String() != want+"\n" {
			t.Errorf("%s: %q, %v; want %q", action, out.String(), err, want)
		}
	}
}

// Each decorator wraps once: a second WithX of its own result returns that result, as
// oauth2.ReuseTokenSource does, so that a pipeline stacked twice does not cache, remember
// failures or request tokens twice.
func TestDecoratorsRefuseADoubleWrap(t *testing.T) {
	base := FuncProvider((&recorder{resp: &plugin.Response{CacheKeyType: plugin.CacheImage, Auth: robot}}).plugin)
	cached := WithCache(base, CacheOptions{Provider: "p"})
	failures := WithFailureCache(base, FailureCacheOptions{TTL: time.Minute})
	tokens := WithServiceAccountToken(base, ServiceAccountTokenOptions{})
	for name, tc := range map[string]struct{ once, twice Provider }{
		"WithCache":               {cached, WithCache(cached, CacheOptions{Provider: "q"})},
		"WithFailureCache":        {failures, WithFailureCache(failures, FailureCacheOptions{TTL: time.Hour})},
		"WithServiceAccountToken": {tokens, WithServiceAccountToken(tokens, ServiceAccountTokenOptions{})},
	} {
		if tc.once == base || tc.twice != tc.once {
			t.Errorf("%s of its own result: got a new wrapper, want the first one", name)
		}
	}
}
