//go:build unix

package imagecred

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1 "k8s.io/kubelet/config/v1"

	"github.com/kplug/kplug/internal/testkit/poll"

	"github.com/kplug/kplug/execplugin"
)

func response(cacheKeyType, cacheDuration, auth string) string {
	s := `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"` + cacheKeyType + `"`
	if cacheDuration != "" {
		s += `,"cacheDuration":"` + cacheDuration + `"`
	}
	return s + `,"auth":` + auth + `}`
}

const regAuth = `{"registry.io":{"username":"u","password":"p"}}`

func TestPluginGetsTheKubeletRequest(t *testing.T) {
	f := newFixture(t)
	k := f.keyring(Options{}, f.provider("p", response("Image", "", regAuth)))
	got := f.lookup(k, "registry.io/team/app:1.0@sha256:"+strings.Repeat("a", 64), nil)
	want := []Credential{{Key: "registry.io", Provider: "p", AuthConfig: AuthConfig{Username: "u", Password: "p"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("credentials (-want +got):\n%s", diff)
	}
	wantReq := `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"registry.io/team/app"}` + "\n"
	if calls := f.fake("p").Calls(); len(calls) != 1 || calls[0].Stdin != wantReq {
		t.Errorf("plugin calls = %+v, want one with stdin %q", calls, wantReq)
	}
}

func TestProviderNotRunForUnmatchedImage(t *testing.T) {
	f := newFixture(t)
	k := f.keyring(Options{}, f.provider("p", response("Image", "", regAuth)))
	if got := f.lookup(k, "other.io/app", nil); len(got) != 0 {
		t.Errorf("credentials %v for an unmatched image", got)
	}
	if n := f.execs("p"); n != 0 {
		t.Errorf("plugin ran %d times for an unmatched image", n)
	}
}

func TestCacheKeyType(t *testing.T) {
	// Lookups, in order; the plugin's matchImages cover both registries.
	images := []string{"a.registry.io/x", "a.registry.io/x", "a.registry.io/y", "b.registry.io/x"}
	for _, tc := range []struct {
		keyType string
		execs   int
	}{
		{"Image", 3},    // x is reused; y and b/x are new images
		{"Registry", 2}, // a.registry.io is reused for y
		{"Global", 1},   // one answer for everything the provider matches
	} {
		t.Run(tc.keyType, func(t *testing.T) {
			f := newFixture(t)
			k := f.keyring(Options{}, f.provider("p", response(tc.keyType, "", `{"*.registry.io":{"username":"u","password":"p"}}`)))
			for _, img := range images {
				if got := f.lookup(k, img, nil); len(got) != 1 {
					t.Fatalf("%s: %d credentials, want 1", img, len(got))
				}
			}
			if n := f.execs("p"); n != tc.execs {
				t.Errorf("plugin ran %d times, want %d", n, tc.execs)
			}
			if hits := f.counter(MetricCacheHits, "p"); int(hits) != len(images)-tc.execs {
				t.Errorf("cache hits %v, want %d", hits, len(images)-tc.execs)
			}
			if misses := f.counter(MetricCacheMisses, "p"); int(misses) != tc.execs {
				t.Errorf("cache misses %v, want %d", misses, tc.execs)
			}
		})
	}
}

func TestCacheDuration(t *testing.T) {
	for _, tc := range []struct {
		name          string
		cacheDuration string
		defaultTTL    time.Duration
		// execs after lookups at 0, ttl-of-interest and just past it
		at    []time.Duration
		execs []int
	}{
		{"absent uses defaultCacheDuration", "", 5 * time.Minute, []time.Duration{0, 5 * time.Minute, time.Nanosecond}, []int{1, 1, 2}},
		{"absent with defaultCacheDuration 0 is not cached", "", 0, []time.Duration{0, 0}, []int{1, 2}},
		{"0s is not cached", "0s", 5 * time.Minute, []time.Duration{0, 0}, []int{1, 2}},
		{"1m overrides the default", "1m", 5 * time.Minute, []time.Duration{0, time.Minute, time.Nanosecond}, []int{1, 1, 2}},
		{"negative is already expired", "-1m", 5 * time.Minute, []time.Duration{0, 0}, []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			p := f.provider("p", response("Image", tc.cacheDuration, regAuth))
			p.DefaultCacheDuration = &metav1.Duration{Duration: tc.defaultTTL}
			k := f.keyring(Options{}, p)
			for i, d := range tc.at {
				f.clock.advance(d)
				f.lookup(k, "registry.io/app", nil)
				if n := f.execs("p"); n != tc.execs[i] {
					t.Fatalf("after lookup %d: plugin ran %d times, want %d", i, n, tc.execs[i])
				}
			}
		})
	}
}

func TestConcurrentLookupsRunThePluginOnce(t *testing.T) {
	f := newFixture(t)
	p := f.provider("p", response("Image", "", regAuth))
	f.fake("p").Hold()
	k := f.keyring(Options{}, p)
	const n = 8

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			creds, err := k.Lookup(t.Context(), "registry.io/app", nil)
			if err == nil && len(creds) != 1 {
				err = errors.New("no credentials")
			}
			errs <- err
		})
	}
	poll.Until(t, "every caller in the run", func() bool { return waiters(t, k, "registry.io/app") == n })
	// The first caller's plugin may not have started yet; the others must be waiting for it.
	f.fake("p").Release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// Callers that joined after the flight ended find the cache; none may exec again.
	if got := f.execs("p"); got != 1 {
		t.Errorf("plugin ran %d times for %d concurrent lookups, want 1", got, n)
	}
}

func TestPluginFailures(t *testing.T) {
	for _, tc := range []struct {
		name       string
		response   string
		fail       bool
		wantErr    string
		execErrors float64
	}{
		{name: "exit code", fail: true, wantErr: `plugin "DIR/p" exited with code 3: registry said no`, execErrors: 1},
		{name: "not JSON", response: "apiVersion: credentialprovider.kubelet.k8s.io/v1\n", wantErr: "error reading GVK from response: "},
		{name: "log line before JSON", response: "fetching\n" + response("Image", "", regAuth), wantErr: "error reading GVK from response: "},
		{name: "wrong apiVersion", response: strings.Replace(response("Image", "", regAuth), "/v1", "/v1beta1", 1),
			wantErr: "apiVersion from credential plugin response did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1"},
		{name: "unknown field", response: strings.Replace(response("Image", "", regAuth), `"auth"`, `"foo":1,"auth"`, 1),
			wantErr: "error decoding credential provider plugin response from stdout"},
		{name: "extra field in auth", response: response("Image", "", `{"registry.io":{"username":"u","password":"secret","auth":"x"}}`),
			wantErr: "error decoding credential provider plugin response from stdout"},
		{name: "invalid cacheKeyType", response: response("image", "", regAuth), wantErr: `the plugin did not return a valid cacheKeyType: "image"`},
		{name: "missing cacheKeyType", response: `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","auth":{}}`,
			wantErr: `the plugin did not return a valid cacheKeyType: ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			p := f.provider("p", tc.response)
			if tc.fail {
				f.fake("p").Exit(3).Stderr("registry said no")
			}
			k := f.keyring(Options{}, p)
			creds, err := k.Lookup(t.Context(), "registry.io/app", nil)
			if len(creds) != 0 {
				t.Errorf("credentials %v despite the failure", creds)
			}
			prefix := `imagecred: provider "p" (` + filepath.Join(f.dir, "p") + `) for image "registry.io/app": `
			if err == nil || !strings.HasPrefix(err.Error(), prefix+strings.ReplaceAll(tc.wantErr, "DIR", f.dir)) {
				t.Errorf("error = %v, want %s%s...", err, prefix, tc.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error leaks the response: %v", err)
			}
			var pe *ProviderError
			if !errors.As(err, &pe) || pe.Provider != "p" {
				t.Errorf("error %T is not a *ProviderError for p", err)
			}
			if got := f.counter(MetricPluginErrors, "p"); got != tc.execErrors {
				t.Errorf("%s = %v, want %v", MetricPluginErrors, got, tc.execErrors)
			}
			if got := testutil.CollectAndCount(f.reg, MetricPluginDuration); got != 1 {
				t.Errorf("%s has %d series, want 1", MetricPluginDuration, got)
			}
			// Failures are not cached: the plugin runs again.
			_, _ = k.Lookup(t.Context(), "registry.io/app", nil)
			if n := f.execs("p"); n != 2 {
				t.Errorf("plugin ran %d times over two failing lookups, want 2", n)
			}
		})
	}
}

func TestFailureCache(t *testing.T) {
	f := newFixture(t)
	p := f.provider("p", "")
	f.fake("p").Exit(3).Stderr("registry said no")
	k := f.keyring(Options{FailureCacheTTL: time.Minute}, p)
	for range 3 {
		if _, err := k.Lookup(t.Context(), "registry.io/app", nil); err == nil || !strings.Contains(err.Error(), "registry said no") {
			t.Fatalf("error = %v, want the plugin's failure", err)
		}
	}
	if n := f.execs("p"); n != 1 {
		t.Errorf("plugin ran %d times within the failure TTL, want 1", n)
	}
	f.clock.advance(time.Minute + time.Nanosecond)
	_, _ = k.Lookup(t.Context(), "registry.io/app", nil)
	if n := f.execs("p"); n != 2 {
		t.Errorf("plugin ran %d times after the failure TTL, want 2", n)
	}
}

func TestFailureCacheIsBounded(t *testing.T) {
	fc := WithFailureCache(nil, FailureCacheOptions{TTL: time.Hour, Size: 2}).(*failureCache)
	now := time.Now()
	for _, k := range []string{"a", "b", "c"} {
		fc.put(k, errors.New(k), now)
	}
	if len(fc.items) != 2 || fc.get("a", now) != nil || fc.get("c", now) == nil {
		t.Errorf("after 3 puts into a cache of 2: %v", fc.items)
	}
}

func TestTimeoutKillsThePlugin(t *testing.T) {
	f := newFixture(t)
	p := f.provider("p", response("Image", "", regAuth))
	f.fake("p").Hold() // never released
	k := f.keyring(Options{Timeout: 300 * time.Millisecond}, p)
	_, err := k.Lookup(t.Context(), "registry.io/app", nil)
	var timeout *execplugin.TimeoutError
	if !errors.As(err, &timeout) {
		t.Fatalf("error = %v, want a timeout", err)
	}
	if got := f.counter(MetricPluginErrors, "p"); got != 1 {
		t.Errorf("%s = %v after a timeout, want 1", MetricPluginErrors, got)
	}
}

func TestKeyringOrder(t *testing.T) {
	f := newFixture(t)
	first := f.provider("first", response("Image", "", `{"registry.io":{"username":"first-host","password":"p"},
		"https://registry.io/v2/team":{"username":"first-team","password":"p"},
		"*.io":{"username":"first-wild","password":"p"}}`), "registry.io")
	second := f.provider("second", response("Image", "", `{"registry.io":{"username":"second-host","password":"p"},
		"registry.io/team/app":{"username":"second-app","password":"p"},
		"other.io":{"username":"second-other","password":"p"}}`), "registry.io")
	k := f.keyring(Options{}, first, second)
	var got []string
	for _, c := range f.lookup(k, "registry.io/team/app", nil) {
		got = append(got, c.Key+"="+c.Username)
	}
	want := []string{
		"registry.io/team/app=second-app", // longest path first
		"registry.io/team=first-team",     // /v2/ stripped, scheme dropped
		"registry.io=first-host",          // one key: providers in config order
		"registry.io=second-host",
		"*.io=first-wild", // wildcards sort after literals
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("credential order (-want +got):\n%s", diff)
	}
}

func TestDockerHubFallback(t *testing.T) {
	f := newFixture(t)
	k := f.keyring(Options{}, f.provider("hub", response("Global", "", `{"https://index.docker.io/v1/":{"username":"hub","password":"p"}}`), "docker.io"))
	got := f.lookup(k, "nginx:1.25", nil)
	if len(got) != 1 || got[0].Username != "hub" || got[0].Key != "index.docker.io" {
		t.Errorf("credentials for nginx = %+v, want the index.docker.io entry", got)
	}
	reqs := f.requests("hub")
	if len(reqs) != 1 || !strings.Contains(reqs[0], `"image":"docker.io/library/nginx"`) {
		t.Errorf("plugin requests %q, want the normalised docker.io/library/nginx", reqs)
	}
}

func TestNewChecksLikeTheKubelet(t *testing.T) {
	f := newFixture(t)
	good := f.provider("p", "")
	if err := os.WriteFile(filepath.Join(f.dir, "noexec"), []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noexec := good
	noexec.Name = "noexec"
	missing := good
	missing.Name = "missing"
	invalid := good
	invalid.MatchImages = nil
	for _, tc := range []struct {
		name   string
		binDir string
		p      kubeletv1.CredentialProvider
		want   string
	}{
		{"bin dir missing", filepath.Join(f.dir, "nope"), good, "imagecred: plugin binary directory " + filepath.Join(f.dir, "nope") + " did not exist"},
		{"binary missing", f.dir, missing, `imagecred: provider "missing": plugin binary executable ` + filepath.Join(f.dir, "missing") + " did not exist"},
		// Issue 32 item 9: the words of execplugin's check, as kplug credential says it.
		{"not executable", f.dir, noexec, `imagecred: provider "noexec": plugin "` + filepath.Join(f.dir, "noexec") + `" cannot be executed: permission denied (the file is not marked executable)`},
		{"invalid config", f.dir, invalid, "failed to validate credential provider config: providers.matchImages: Required value: at least 1 item in matchImages is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Options{Config: &Config{Providers: []kubeletv1.CredentialProvider{tc.p}}, BinDir: tc.binDir})
			if err == nil || err.Error() != tc.want {
				t.Errorf("New: %v\nwant: %s", err, tc.want)
			}
		})
	}
}

// TestCheckBinaries covers issue 32 item 9: `kplug image-credential validate --bin-dir`
// checks each provider's binary as the kubelet will, and reports every problem.
func TestCheckBinaries(t *testing.T) {
	f := newFixture(t)
	good := f.provider("p", "")
	if err := os.WriteFile(filepath.Join(f.dir, "noexec"), []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.dir, "adir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(f.dir, "fifo"), 0o700); err != nil {
		t.Fatal(err)
	}
	var providers []kubeletv1.CredentialProvider
	for _, name := range []string{"p", "missing", "noexec", "adir", "fifo"} {
		p := good
		p.Name = name
		providers = append(providers, p)
	}
	path := func(name string) string { return filepath.Join(f.dir, name) }
	want := `imagecred: provider "missing": plugin binary executable ` + path("missing") + " did not exist\n" +
		`imagecred: provider "noexec": plugin "` + path("noexec") + `" cannot be executed: permission denied (the file is not marked executable)` + "\n" +
		`imagecred: provider "adir": plugin "` + path("adir") + `" cannot be executed: is a directory` + "\n" +
		`imagecred: provider "fifo": plugin "` + path("fifo") + `" cannot be executed: is not a regular file`
	cfg := &Config{Providers: providers}
	if err := cfg.CheckBinaries(f.dir); err == nil || err.Error() != want {
		t.Errorf("CheckBinaries: %v\nwant: %s", err, want)
	}
	if err := (&Config{Providers: providers[:1]}).CheckBinaries(f.dir); err != nil {
		t.Errorf("CheckBinaries of a good provider: %v", err)
	}
	if err, want := cfg.CheckBinaries(path("nope")), "imagecred: plugin binary directory "+path("nope")+" did not exist"; err == nil || err.Error() != want {
		t.Errorf("CheckBinaries of a missing directory: %v\nwant: %s", err, want)
	}
}

func TestConfigHashMetric(t *testing.T) {
	f := newFixture(t)
	f.keyring(Options{}, f.provider("p", ""))
	want := "# HELP kubelet_credential_provider_config_info Information about the last applied credential provider configuration with hash as label\n" +
		"# TYPE kubelet_credential_provider_config_info gauge\n" +
		"kubelet_credential_provider_config_info{hash=\"sha256:test\"} 1\n"
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), MetricConfigInfo); err != nil {
		t.Error(err)
	}
}

// counter is the value of a counter's plugin_name="p" series, 0 when absent.
func (f *fixture) counter(name, p string) float64 {
	f.t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "plugin_name" && l.GetValue() == p {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestWaitingCallerHonoursItsContext(t *testing.T) {
	f := newFixture(t)
	p := f.provider("p", response("Image", "", regAuth))
	f.fake("p").Hold()
	k := f.keyring(Options{}, p)
	waiting := func(n int) func() bool {
		return func() bool { return waiters(t, k, "registry.io/app") == n }
	}

	first := make(chan error, 1)
	go func() {
		_, err := k.Lookup(t.Context(), "registry.io/app", nil)
		first <- err
	}()
	poll.Until(t, "the first caller in the run", waiting(1))
	ctx, cancel := context.WithCancel(t.Context())
	second := make(chan error, 1)
	go func() {
		_, err := k.Lookup(ctx, "registry.io/app", nil)
		second <- err
	}()
	poll.Until(t, "the second caller in the run", waiting(2))
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: %v, want context.Canceled", err)
	}
	f.fake("p").Release()
	if err := <-first; err != nil {
		t.Errorf("first caller: %v", err)
	}
}
