package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

// TestMain makes the test binary, re-executed, a fake plugin (internal/testkit/exectest) whose
// behaviour "cached-login" is a plugin built with this package: a slow login behind a Cache
// in the fake's directory, counting real logins in <dir>/logins.
func TestMain(m *testing.M) {
	exectest.Main(map[string]func() int{"cached-login": cachedLogin, "status-main": statusMain})
	os.Exit(m.Run())
}

func cachedLogin() int {
	dir := os.Getenv(exectest.Env)
	cache := &Cache{Dir: filepath.Join(dir, "cache"), TTL: time.Hour}
	slowLogin := func(context.Context, *Info) (*wire.Status, error) {
		f, err := os.OpenFile(filepath.Join(dir, "logins"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		_, _ = f.Write([]byte("x"))
		_ = f.Close()
		time.Sleep(300 * time.Millisecond)
		return &wire.Status{Token: "shared"}, nil
	}
	if err := Run(context.Background(), cache.Wrap("k", slowLogin), os.Getenv(wire.InfoEnv), os.Stdout); err != nil { //nolint:forbidigo // a helper process: no test here
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestInfoRoundTrip(t *testing.T) {
	t.Parallel()
	cluster := &wire.Cluster{Server: "https://k.example:6443", TLSServerName: "sni", CertificateAuthorityData: []byte("CA"), ProxyURL: "socks5://127.0.0.1:1080", Config: []byte(`{"audience":"a"}`)}
	for _, v := range []string{wire.V1, wire.V1beta1, wire.V1alpha1} {
		var resp *wire.Response
		cl := cluster
		if v == wire.V1alpha1 {
			resp, cl = &wire.Response{Code: 401, Header: map[string][]string{"X": {"y"}}}, nil
		}
		raw, err := (&wire.Info{APIVersion: v, Interactive: true, Cluster: cl, Response: resp}).Encode()
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
		exp := wire.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		if err := Write(&out, info, &wire.Status{Token: "t", ExpirationTimestamp: &exp}); err != nil {
			t.Fatal(err)
		}
		cred, err := wire.Decode(v, out.Bytes())
		if err != nil || cred.Token != "t" || !cred.ExpirationTimestamp.Equal(exp.Time) {
			t.Errorf("%s: client decodes %v, %v", v, cred, err)
		}
	}
}

func TestLoadInfoErrors(t *testing.T) {
	t.Parallel()
	info, err := LoadInfo("")
	if err != nil || info.APIVersion != wire.V1beta1 || info.FromClient {
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
}

func TestCache(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cache")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &Cache{Dir: dir, Now: func() time.Time { return now }, Skew: 10 * time.Second}
	fetches := 0
	fetch := func(token string, expiry time.Time, err error) func(context.Context) (*wire.Status, error) {
		return func(context.Context) (*wire.Status, error) {
			fetches++
			if err != nil {
				return nil, err
			}
			s := &wire.Status{Token: token}
			if !expiry.IsZero() {
				e := wire.NewTime(expiry)
				s.ExpirationTimestamp = &e
			}
			return s, nil
		}
	}
	ctx := t.Context()
	get := func(f func(context.Context) (*wire.Status, error)) string {
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
		f       func(context.Context) (*wire.Status, error)
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
	p := exectest.New(t).Behaviour("cached-login")
	info, err := (&wire.Info{APIVersion: wire.V1}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			cmd := exec.Command(p.Path())
			cmd.Env = append(append(os.Environ(), p.Env()...), wire.InfoEnv+"="+string(info))
			out, err := cmd.Output()
			if err == nil {
				var cred *wire.Status
				if cred, err = wire.Decode(wire.V1, out); err == nil && cred.Token != "shared" {
					err = fmt.Errorf("token %q", cred.Token)
				}
			}
			if err != nil {
				errs <- fmt.Errorf("%w: %s", err, out)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(p.Dir, "logins"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(b); n != 1 {
		t.Errorf("8 concurrent plugin processes logged in %s times, want 1", strconv.Itoa(n))
	}
}

// TestWrapDropsARejectedEntry: a v1alpha1 client that says the credential was rejected gets
// a fresh one, not the cached one.
func TestWrapDropsARejectedEntry(t *testing.T) {
	t.Parallel()
	logins := 0
	f := (&Cache{Dir: t.TempDir(), TTL: time.Hour}).Wrap("k", func(context.Context, *Info) (*wire.Status, error) {
		logins++
		return &wire.Status{Token: fmt.Sprint("t", logins)}, nil
	})
	ctx := t.Context()
	for i, info := range []*Info{
		{APIVersion: wire.V1alpha1},
		{APIVersion: wire.V1alpha1},
		{APIVersion: wire.V1alpha1, Response: &wire.Response{Code: 401}},
		{APIVersion: wire.V1alpha1},
	} {
		s, err := f(ctx, info)
		if want := []string{"t1", "t1", "t2", "t2"}[i]; err != nil || s.Token != want {
			t.Errorf("call %d: %+v, %v; want %s", i, s, err, want)
		}
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	ok := func(context.Context, *Info) (*wire.Status, error) { return &wire.Status{Token: "t"}, nil }
	if err := Run(t.Context(), ok, "", &out); err != nil || out.String() != `{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","spec":{},"status":{"token":"t"}}`+"\n" {
		t.Errorf("run by hand: %q, %v; want a v1beta1 answer", out.String(), err)
	}
	failing := func(context.Context, *Info) (*wire.Status, error) { return nil, errors.New("login required") }
	if err := Run(t.Context(), failing, "", io.Discard); err == nil || err.Error() != "login required" {
		t.Errorf("failing function: %v", err)
	}
	if err := Run(t.Context(), ok, "{", io.Discard); err == nil || !strings.HasPrefix(err.Error(), "plugin: KUBERNETES_EXEC_INFO is not an ExecCredential") {
		t.Errorf("bad info: %v", err)
	}
}

// statusMain is a plugin program whose function explains its failure.
func statusMain() int {
	Main(func(context.Context, *Info) (*wire.Status, error) {
		return nil, &StatusError{Message: "no session for prod; run: my-login prod", Reason: "Unauthorized", Code: 401}
	})
	return 0 // Main exits
}

// TestRunStatusError (issue 28, kubernetes/kubernetes#139150): a function that fails with
// a *StatusError has Run print a metav1.Status on stdout, which clients show; other errors
// print nothing, as before.
func TestRunStatusError(t *testing.T) {
	t.Parallel()
	cause := errors.New("refresh token revoked")
	for _, tt := range []struct {
		name      string
		err       error
		wantOut   string
		wantError string
	}{
		{"with reason and code", &StatusError{Message: "no session for prod; run: my-login prod", Reason: "Unauthorized", Code: 401, Err: cause},
			`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"no session for prod; run: my-login prod","reason":"Unauthorized","code":401}` + "\n",
			"no session for prod; run: my-login prod"},
		{"the cause's message", &StatusError{Err: cause},
			`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"refresh token revoked"}` + "\n", "refresh token revoked"},
		{"wrapped", fmt.Errorf("prod: %w", &StatusError{Message: "m"}),
			`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m"}` + "\n", "prod: m"},
		{"not a StatusError", cause, "", "refresh token revoked"},
	} {
		var out bytes.Buffer
		err := Run(t.Context(), func(context.Context, *Info) (*wire.Status, error) { return nil, tt.err }, "", &out)
		if out.String() != tt.wantOut || err == nil || err.Error() != tt.wantError || !errors.Is(err, tt.err) {
			t.Errorf("%s: stdout %q, %v\nwant %q, %s", tt.name, out.String(), err, tt.wantOut, tt.wantError)
		}
	}
}

// Main makes a *StatusError the plugin's whole failure: the status on stdout, the message
// on stderr (for clients that do not read the status), and exit code 1.
func TestMainStatusError(t *testing.T) {
	t.Parallel()
	p := exectest.New(t).Behaviour("status-main")
	cmd := exec.Command(p.Path())
	cmd.Env = append(os.Environ(), p.Env()...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want code 1", err)
	}
	f, err := wire.ParseFailure(out)
	if want := (wire.Failure{Message: "no session for prod; run: my-login prod", Reason: "Unauthorized", Code: 401}); err != nil || *f != want {
		t.Errorf("stdout %q: %+v, %v; want %+v", out, f, err, want)
	}
	if stderr.String() != "error: no session for prod; run: my-login prod\n" {
		t.Errorf("stderr %q", stderr.String())
	}
}

func TestLoadInfoLockFilePath(t *testing.T) {
	t.Parallel()
	info, err := LoadInfo(`{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{"interactive":false,"lockFilePath":"/run/user/1000/kplug/client-0123.lock"}}`)
	if err != nil || info.LockFilePath != "/run/user/1000/kplug/client-0123.lock" {
		t.Errorf("LoadInfo: %+v, %v", info, err)
	}
}

// Write refuses what the client would refuse, so a plugin author hears it at once; and
// it writes signing material (KEP-6308) only for a client that asked for it.
func TestWriteChecksStatus(t *testing.T) {
	plain := &Info{APIVersion: wire.V1}
	signing := &Info{APIVersion: wire.V1, HTTPSignature: &wire.HTTPSignatureRequest{SignedHeaders: []wire.HTTPSignatureHeader{{Name: "X-K8s-Audience"}}}}
	material := func() *wire.HTTPSignature {
		return &wire.HTTPSignature{KeyID: "k1", PrivateKey: "-----BEGIN PRIVATE KEY-----\n...", SignedHeaders: map[string]string{"X-K8s-Audience": "https://c.example"}}
	}
	for _, tc := range []struct {
		name   string
		info   *Info
		status *wire.Status
		err    string
	}{
		{"token", plain, &wire.Status{Token: "t"}, ""},
		{"nothing", plain, &wire.Status{}, "plugin: a credential needs a token, a client certificate or signing material"},
		{"signing material asked for", signing, &wire.Status{HTTPSignature: material()}, ""},
		{"signing material not asked for", plain, &wire.Status{HTTPSignature: material()}, "the client did not ask for signing material"},
		{"signing material beside a token", signing, &wire.Status{Token: "t", HTTPSignature: material()}, "a status may carry a signature or a credential that transits, never both"},
		{"certificate without key", plain, &wire.Status{ClientCertificateData: "x"}, "not both"},
	} {
		var out bytes.Buffer
		err := Write(&out, tc.info, tc.status)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
		if err != nil && out.Len() > 0 {
			t.Errorf("%s: refused, yet wrote %q", tc.name, out.String())
		}
	}
}

// TestCacheKeepsKeyMaterialOut: an answer that must never be written down
// (wire.Status.Unstorable: signing material, KEP-6308, whose private key or secret is the
// credential itself; an exec proxy answer) is passed on uncached, whatever its expiry and
// TTL, and a client that asks for signing material is answered by the function, never from
// an entry stored for other clients. Each call fetches: a second call would be a hit if
// anything had been stored.
func TestCacheKeepsKeyMaterialOut(t *testing.T) {
	t.Parallel()
	const privateKey, secret = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIKEYMATERIALKEYMATERIALKEYMATERIAL\n-----END PRIVATE KEY-----\n", "hmac-secret-never-on-disk"
	exp := wire.NewTime(time.Now().Add(time.Hour))
	for _, tc := range []struct {
		name   string
		status *wire.Status
		secret string // what must not be on disk
	}{
		{"private key", &wire.Status{ExpirationTimestamp: &exp, HTTPSignature: &wire.HTTPSignature{KeyID: "k1", PrivateKey: privateKey}}, "KEYMATERIALKEYMATERIAL"},
		{"shared secret", &wire.Status{ExpirationTimestamp: &exp, HTTPSignature: &wire.HTTPSignature{KeyID: "k1", Secret: secret}}, secret},
		{"shared secret in base64", &wire.Status{HTTPSignature: &wire.HTTPSignature{KeyID: "k1", SecretBase64: "c2VjcmV0LW5ldmVyLW9uLWRpc2s="}}, "c2VjcmV0LW5ldmVyLW9uLWRpc2s="},
		{"exec proxy answer", &wire.Status{ExpirationTimestamp: &exp, ClientCertificateData: "CERT", ClientKeyData: "PROXY-HOP-KEY",
			ProxyConfig: &wire.ProxyConfig{URL: "unix:///run/p.sock", CertificateAuthorityData: []byte("CA")}}, "PROXY-HOP-KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "cache")
			c := &Cache{Dir: dir, TTL: time.Hour}
			fetches := 0
			for i := range 2 {
				s, err := c.Do(t.Context(), "key", func(context.Context) (*wire.Status, error) {
					fetches++
					return tc.status, nil
				})
				if err != nil || s != tc.status {
					t.Errorf("call %d: %+v, %v; want the fetched answer", i, s, err)
				}
			}
			if fetches != 2 {
				t.Errorf("%d fetches for 2 calls, want 2: the answer was served from the cache", fetches)
			}
			if files := filesHolding(t, dir, tc.secret); len(files) != 0 {
				t.Errorf("the key material is on disk in %v", files)
			}
		})
	}
	t.Run("a client that asks for signing material", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "cache")
		signing := &wire.HTTPSignature{KeyID: "k1", PrivateKey: privateKey}
		f := (&Cache{Dir: dir, TTL: time.Hour}).Wrap("k", func(_ context.Context, info *Info) (*wire.Status, error) {
			if info.HTTPSignature != nil {
				return &wire.Status{HTTPSignature: signing}, nil
			}
			return &wire.Status{Token: "t", ExpirationTimestamp: &exp}, nil
		})
		ctx := t.Context()
		asks := &Info{APIVersion: wire.V1, HTTPSignature: &wire.HTTPSignatureRequest{}}
		for i, info := range []*Info{{APIVersion: wire.V1}, asks, asks} {
			s, err := f(ctx, info)
			if want := info.HTTPSignature != nil; err != nil || (s.HTTPSignature == signing) != want {
				t.Errorf("call %d: %+v, %v; want signing material %v", i, s, err, want)
			}
		}
		if files := filesHolding(t, dir, "KEYMATERIALKEYMATERIAL"); len(files) != 0 {
			t.Errorf("the key material is on disk in %v", files)
		}
	})
}

// filesHolding lists the files under dir whose content contains s.
func filesHolding(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), s) {
			found = append(found, path)
		}
		return err
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return found
}
