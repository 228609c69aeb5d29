package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/execcred"
)

const helperEnv = "KPLUG_PLUGIN_CACHE_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		// One plugin process: fetch through the shared cache, counting real fetches.
		c := &Cache{Dir: dir, TTL: time.Hour}
		s, err := c.Do(context.Background(), "k", func(context.Context) (*execcred.Status, error) {
			f, err := os.OpenFile(filepath.Join(dir, "fetches"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				return nil, err
			}
			_, _ = f.Write([]byte("x"))
			_ = f.Close()
			time.Sleep(300 * time.Millisecond) // a slow login
			return &execcred.Status{Token: "shared"}, nil
		})
		if err != nil || s.Token != "shared" {
			fmt.Fprintln(os.Stderr, s, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestInfoRoundTrip(t *testing.T) {
	t.Parallel()
	cluster := &execcred.Cluster{Server: "https://k.example:6443", TLSServerName: "sni", CertificateAuthorityData: []byte("CA"), ProxyURL: "socks5://127.0.0.1:1080", Config: []byte(`{"audience":"a"}`)}
	for _, v := range []string{execcred.V1, execcred.V1beta1, execcred.V1alpha1} {
		var resp *execcred.Response
		cl := cluster
		if v == execcred.V1alpha1 {
			resp, cl = &execcred.Response{Code: 401, Header: map[string][]string{"X": {"y"}}}, nil
		}
		raw, err := execcred.ExecInfo(v, true, cl, resp)
		if err != nil {
			t.Fatal(err)
		}
		info, err := LoadInfo(string(raw))
		if err != nil {
			t.Fatal(err)
		}
		want := &Info{APIVersion: v, Interactive: true, Cluster: cl, Response: resp, FromClient: true}
		if diff := cmp.Diff(want, info); diff != "" {
			t.Errorf("%s (-want +got):\n%s", v, diff)
		}
		// The answer decodes as the client expects.
		var out bytes.Buffer
		exp := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		if err := Write(&out, info, &execcred.Status{Token: "t", ExpirationTimestamp: &exp}); err != nil {
			t.Fatal(err)
		}
		cred, err := execcred.DecodeOutput(v, out.Bytes())
		if err != nil || cred.Token != "t" || !cred.Expiry.Equal(exp.Time) {
			t.Errorf("%s: client decodes %v, %v", v, cred, err)
		}
	}
}

func TestLoadInfoErrors(t *testing.T) {
	t.Parallel()
	info, err := LoadInfo("")
	if err != nil || info.APIVersion != execcred.V1beta1 || info.FromClient {
		t.Errorf("empty: %+v %v", info, err)
	}
	for in, want := range map[string]string{
		`{`: "plugin: KUBERNETES_EXEC_INFO is not an ExecCredential: unexpected end of JSON input",
		`{"kind":"ExecCredential","apiVersion":"v1"}`:                             `plugin: KUBERNETES_EXEC_INFO has unsupported apiVersion "v1"`,
		`{"kind":"Pod","apiVersion":"client.authentication.k8s.io/v1","spec":{}}`: `plugin: KUBERNETES_EXEC_INFO has kind "Pod", want ExecCredential`,
	} {
		if _, err := LoadInfo(in); err == nil || err.Error() != want {
			t.Errorf("LoadInfo(%s) = %v, want %s", in, err, want)
		}
	}
	if _, err := (&Info{APIVersion: execcred.V1}).RESTConfig(); err == nil {
		t.Error("RESTConfig without cluster info succeeded")
	}
}

func TestRESTConfig(t *testing.T) {
	t.Parallel()
	info := &Info{Cluster: &execcred.Cluster{Server: "https://k:6443", TLSServerName: "sni", CertificateAuthorityData: []byte("CA"), ProxyURL: "http://127.0.0.1:3128"}}
	cfg, err := info.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://k:6443" || cfg.ServerName != "sni" || string(cfg.CAData) != "CA" || cfg.Proxy == nil {
		t.Errorf("config %+v", cfg)
	}
}

func TestCache(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cache")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &Cache{Dir: dir, Now: func() time.Time { return now }, Skew: 10 * time.Second}
	fetches := 0
	fetch := func(token string, expiry time.Time, err error) func(context.Context) (*execcred.Status, error) {
		return func(context.Context) (*execcred.Status, error) {
			fetches++
			if err != nil {
				return nil, err
			}
			s := &execcred.Status{Token: token}
			if !expiry.IsZero() {
				e := metav1.NewTime(expiry)
				s.ExpirationTimestamp = &e
			}
			return s, nil
		}
	}
	ctx := context.Background()
	get := func(f func(context.Context) (*execcred.Status, error)) string {
		t.Helper()
		s, err := c.Do(ctx, "key", f)
		if err != nil {
			return "error: " + err.Error()
		}
		return s.Token
	}
	boom := errors.New("login failed")
	steps := []struct {
		name    string
		advance time.Duration
		f       func(context.Context) (*execcred.Status, error)
		want    string
		fetches int
	}{
		{"failure is not cached", 0, fetch("", time.Time{}, boom), "error: login failed", 1},
		{"first fetch", 0, fetch("a", now.Add(time.Minute), nil), "a", 2},
		{"served from cache", 30 * time.Second, fetch("b", now.Add(time.Hour), nil), "a", 2},
		{"within skew of expiry: fetched", 21 * time.Second, fetch("b", now.Add(time.Hour), nil), "b", 3},
		{"no expiry and no TTL: not cached", time.Hour, fetch("c", time.Time{}, nil), "c", 4},
		{"so fetched again", 0, fetch("d", time.Time{}, nil), "d", 5},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		if got := get(s.f); got != s.want || fetches != s.fetches {
			t.Errorf("%s: got %q after %d fetches, want %q after %d", s.name, got, fetches, s.want, s.fetches)
		}
	}
	// Files are private.
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("cache dir mode %v, %v", info.Mode().Perm(), err)
	}
	entries, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, e := range entries {
		if fi, _ := os.Stat(e); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", e, fi.Mode().Perm())
		}
		// A corrupt entry is a miss, not an error.
		if err := os.WriteFile(e, []byte(`{"status":`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if len(entries) != 1 {
		t.Fatalf("%d entries, want 1", len(entries))
	}
	now = now.Add(time.Hour)
	if got := get(fetch("e", now.Add(time.Hour), nil)); got != "e" {
		t.Errorf("after corruption: %q", got)
	}
	if err := c.Delete("key"); err != nil {
		t.Fatal(err)
	}
	if got := get(fetch("f", now.Add(time.Hour), nil)); got != "f" {
		t.Errorf("after Delete: %q", got)
	}
}

func TestCacheSharedByProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("%w: %s", err, out)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "fetches"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(b); n != 1 {
		t.Errorf("8 concurrent plugin processes fetched %s times, want 1", strconv.Itoa(n))
	}
}
