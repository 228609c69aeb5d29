package execcache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

var (
	kubectlA = Client{PID: 1001, Start: "500"}
	kubectlB = Client{PID: 1002, Start: "501"}
	kubectlC = Client{PID: 1003, Start: "502"}
)

// TestRunServesAndRefreshes walks one entry through its life: a miss runs the plugin,
// other clients are served the same bytes, and the client the answer was given to calling
// again is a refresh after a 401.
func TestRunServesAndRefreshes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	info := execInfoEnv(t, execcred.V1, nil, nil)
	steps := []struct {
		name   string
		client Client
		want   string
		runs   int
	}{
		{"miss: the plugin runs", kubectlA, answer(execcred.V1, "none", 1, ""), 1},
		{"another client: served from the cache", kubectlB, answer(execcred.V1, "none", 1, ""), 1},
		{"a third client", kubectlC, answer(execcred.V1, "none", 1, ""), 1},
		{"an unknown client is always served", Client{}, answer(execcred.V1, "none", 1, ""), 1},
		{"the first client again: its 401 refresh runs the plugin", kubectlA, answer(execcred.V1, "none", 2, ""), 2},
		{"B was served the old answer, not this one: served", kubectlB, answer(execcred.V1, "none", 2, ""), 2},
		{"B again: refresh", kubectlB, answer(execcred.V1, "none", 3, ""), 3},
		{"A was not served this generation: served", kubectlA, answer(execcred.V1, "none", 3, ""), 3},
		{"same pid, different start time: another process", Client{PID: 1001, Start: "999"}, answer(execcred.V1, "none", 3, ""), 3},
	}
	for _, s := range steps {
		out, err := h.call(s.client, info)
		if err != nil || out != s.want || h.plugin.Runs() != s.runs {
			t.Errorf("%s: %q, %v after %d runs\nwant %q after %d", s.name, out, err, h.plugin.Runs(), s.want, s.runs)
		}
	}
	if h.stderr.Len() != 0 {
		t.Errorf("stderr %q, want nothing at the default log level", h.stderr.String())
	}
}

// TestRunV1alpha1Response: a v1alpha1 client that sends spec.response (the server
// rejected the credential) gets a fresh one, whoever it is.
func TestRunV1alpha1Response(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	plain := execInfoEnv(t, execcred.V1alpha1, nil, nil)
	rejected := execInfoEnv(t, execcred.V1alpha1, nil, &execcred.Response{Code: 401, Header: map[string][]string{"Www-Authenticate": {"Bearer"}}})
	for i, s := range []struct {
		client Client
		info   string
		runs   int
	}{{kubectlA, plain, 1}, {kubectlB, plain, 1}, {kubectlC, rejected, 2}, {kubectlB, plain, 2}} {
		out, err := h.call(s.client, s.info)
		if want := answer(execcred.V1alpha1, "none", s.runs, ""); err != nil || out != want || h.plugin.Runs() != s.runs {
			t.Errorf("call %d: %q, %v after %d runs, want %q", i, out, err, h.plugin.Runs(), want)
		}
	}
}

func TestRunExpiryAndSkew(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		expiry    time.Duration // from start; 0: none
		skew, ttl time.Duration
		servedFor time.Duration // the last moment still served
		notCached bool
	}{
		{name: "default skew: 1m before expiry", expiry: 10 * time.Minute, servedFor: 9*time.Minute - time.Second},
		{name: "skew flag", expiry: 10 * time.Minute, skew: 5 * time.Minute, servedFor: 5*time.Minute - time.Second},
		{name: "no skew", expiry: 10 * time.Minute, skew: -1, servedFor: 10*time.Minute - time.Second},
		{name: "short-lived: at most half the lifetime is skew", expiry: time.Minute, servedFor: 30*time.Second - time.Second},
		{name: "already expired: not cached", expiry: -time.Minute, notCached: true},
		{name: "no expiry: default TTL", ttl: 20 * time.Minute, servedFor: 20*time.Minute - time.Second},
		{name: "no expiry, TTL 0: not cached", notCached: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.opts.Skew, h.opts.DefaultTTL = tt.skew, tt.ttl
			h.now = start
			expiry := ""
			if tt.expiry != 0 {
				expiry = start.Add(tt.expiry).Format(time.RFC3339)
				h.plugin.Stdout(answerTemplate(expiry))
			}
			info := execInfoEnv(t, execcred.V1beta1, nil, nil)
			if _, err := h.call(kubectlA, info); err != nil {
				t.Fatal(err)
			}
			if tt.notCached {
				if files := h.entryFiles(); len(files) != 0 {
					t.Errorf("stored %v", files)
				}
				if _, err := h.call(kubectlB, info); err != nil || h.plugin.Runs() != 2 {
					t.Errorf("second call: %v after %d runs, want 2", err, h.plugin.Runs())
				}
				return
			}
			h.now = start.Add(tt.servedFor)
			out, err := h.call(kubectlB, info)
			if want := answer(execcred.V1beta1, "none", 1, expiry); err != nil || out != want || h.plugin.Runs() != 1 {
				t.Errorf("at +%v: %q, %v after %d runs, want the cached answer", tt.servedFor, out, err, h.plugin.Runs())
			}
			h.now = start.Add(tt.servedFor + time.Second)
			out, err = h.call(kubectlC, info)
			if want := answer(execcred.V1beta1, "none", 2, expiry); err != nil || out != want || h.plugin.Runs() != 2 {
				t.Errorf("at +%v: %q, %v after %d runs, want a new run", tt.servedFor+time.Second, out, err, h.plugin.Runs())
			}
		})
	}
}

// TestRunKeepsClustersApart: with provideClusterInfo, each cluster gets its own entry,
// and the environment the plugin sees chooses the entry too.
func TestRunKeepsClustersApart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	prod := execInfoEnv(t, execcred.V1, &execcred.Cluster{Server: "https://prod:6443", Config: []byte("null")}, nil)
	dev := execInfoEnv(t, execcred.V1, &execcred.Cluster{Server: "https://dev:6443", Config: []byte("null")}, nil)
	calls := []struct {
		info, want string
		runs       int
	}{
		{prod, answer(execcred.V1, "https://prod:6443", 1, ""), 1},
		{dev, answer(execcred.V1, "https://dev:6443", 2, ""), 2},
		{prod, answer(execcred.V1, "https://prod:6443", 1, ""), 2},
		{dev, answer(execcred.V1, "https://dev:6443", 2, ""), 2},
	}
	for i, c := range calls {
		out, err := h.call(Client{}, c.info)
		if err != nil || out != c.want || h.plugin.Runs() != c.runs {
			t.Errorf("call %d: %q, %v after %d runs, want %q", i, out, err, h.plugin.Runs(), c.want)
		}
	}
	if n := len(h.entryFiles()); n != 2 {
		t.Errorf("%d entries, want 2", n)
	}
	// A variable such as a kubeconfig's exec env sets is part of the key; one that only
	// differs between shells is not; other arguments are another entry.
	for _, c := range []struct {
		env  []string
		args []string
		runs int
	}{
		{[]string{"AWS_PROFILE=prod"}, nil, 3},
		{[]string{"AWS_PROFILE=dev"}, nil, 4},
		{[]string{"AWS_PROFILE=prod", "PWD=/elsewhere", "TERM_SESSION_ID=42", "_=/usr/bin/helm"}, nil, 4},
		{[]string{"AWS_PROFILE=prod"}, []string{"--profile=other"}, 5},
	} {
		h.env = c.env
		h.opts.Args = append([]string{"-test.run=^$"}, c.args...)
		if _, err := h.call(Client{}, prod); err != nil || h.plugin.Runs() != c.runs {
			t.Errorf("env %v args %v: %v after %d runs, want %d", c.env, c.args, err, h.plugin.Runs(), c.runs)
		}
	}
}

// TestRunFailures: a failing plugin's stdout, stderr and exit code come through; with the
// failure window off nothing is stored, and an entry being refreshed is gone even when the
// refresh fails. A caller without a terminal is told what to run in one.
func TestRunFailures(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.opts.Failures = -1
	info := execInfoEnv(t, execcred.V1, nil, nil)
	if _, err := h.call(kubectlA, info); err != nil {
		t.Fatal(err)
	}
	h.plugin.Exit(3).Stdout(`{"kind":"Status","message":"login required"}`).Stderr("error: login required\n")
	out, err := h.call(kubectlA, info) // a refresh, which fails
	var exitErr *execplugin.ExitError
	hint := "error: login required\nexec-cache: " + os.Args[0] + " ran without a terminal, because this client cannot prompt. If it needs one to log in, " +
		"run a kubectl command with the same kubeconfig and context in a terminal (e.g. kubectl auth whoami); this client is then served that login from the cache.\n"
	if !errors.As(err, &exitErr) || exitErr.Code != 3 || out != `{"kind":"Status","message":"login required"}` || h.stderr.String() != hint {
		t.Errorf("failing plugin: %q, %v, stderr %q", out, err, h.stderr.String())
	}
	if files := h.entryFiles(); len(files) != 0 {
		t.Errorf("entries %v after a failed refresh, want the rejected one gone", files)
	}
	// Exit 0 with an answer that is not a valid credential: printed unchanged, not stored.
	h.plugin.Exit(0).Stderr("")
	h.stderr.Reset()
	for _, bad := range []string{"not json", `{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}`, `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}`} {
		h.plugin.Stdout(bad)
		out, err := h.call(kubectlB, info)
		if err != nil || out != bad || len(h.entryFiles()) != 0 {
			t.Errorf("invalid answer %q: printed %q, %v, %d entries", bad, out, err, len(h.entryFiles()))
		}
	}
	if got := strings.Count(h.stderr.String(), `level=WARN msg="exec-cache: not caching the answer: it is not a valid ExecCredential"`); got != 3 {
		t.Errorf("%d warnings, want 3: %q", got, h.stderr.String())
	}
}

func TestRunBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, err := h.call(kubectlA, wire.InfoEnv+`={"apiVersion":"client.authentication.k8s.io/v2","kind":"ExecCredential"}`)
	if err == nil || err.Error() != `exec-cache: KUBERNETES_EXEC_INFO has unsupported apiVersion "client.authentication.k8s.io/v2"` {
		t.Errorf("bad exec info: %v", err)
	}
	_, err = h.call(kubectlA, wire.InfoEnv+`=garbage`)
	if err == nil || !strings.HasPrefix(err.Error(), "exec-cache: KUBERNETES_EXEC_INFO is not an ExecCredential: ") {
		t.Errorf("garbage exec info: %v", err)
	}
	h.opts.Command = filepath.Join(t.TempDir(), "missing-plugin")
	_, err = h.call(kubectlA, execInfoEnv(t, execcred.V1, nil, nil))
	if err == nil || err.Error() != `exec-cache: plugin "`+h.opts.Command+`" not found: `+h.opts.Command+` does not exist` {
		t.Errorf("missing plugin: %v", err)
	}
	if h.plugin.Runs() != 0 || len(h.entryFiles()) != 0 {
		t.Errorf("%d runs, %d entries after bad input", h.plugin.Runs(), len(h.entryFiles()))
	}
}

// TestRunWithoutExecInfo: run by hand, the wrapper passes the plugin through uncached.
func TestRunWithoutExecInfo(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for i := 1; i <= 2; i++ {
		out, err := h.call(kubectlA, "")
		if err != nil || out != answer("", "none", i, "") {
			t.Errorf("call %d: %q, %v", i, out, err)
		}
	}
	if len(h.entryFiles()) != 0 {
		t.Error("stored an answer without KUBERNETES_EXEC_INFO")
	}
}

// TestRunReplacesCorruptEntries: a truncated or garbage entry is a miss and is replaced.
func TestRunReplacesCorruptEntries(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	info := execInfoEnv(t, execcred.V1, nil, nil)
	if _, err := h.call(kubectlA, info); err != nil {
		t.Fatal(err)
	}
	files := h.entryFiles()
	if len(files) != 1 {
		t.Fatalf("entries %v", files)
	}
	valid, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	for i, corrupt := range [][]byte{
		valid[:len(valid)/2],
		[]byte("\x00\x01garbage"),
		{},
		[]byte(strings.Replace(string(valid), `"schema":1`, `"schema":7`, 1)),
		[]byte(strings.Replace(string(valid), `"output":"`, `"output":"AAAA`, 1)), // not a credential
	} {
		if err := os.WriteFile(files[0], corrupt, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := h.call(Client{}, info)
		if want := answer(execcred.V1, "none", i+2, ""); err != nil || out != want {
			t.Errorf("corruption %d: %q, %v, want a new run", i, out, err)
		}
		if out, _ := h.call(Client{}, info); out != answer(execcred.V1, "none", i+2, "") {
			t.Errorf("corruption %d: not replaced: %q", i, out)
		}
	}
}

func TestRunPermissions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if err := os.MkdirAll(h.cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(h.cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := h.call(kubectlA, execInfoEnv(t, execcred.V1, nil, nil)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(h.cache); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("cache directory: %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(h.cache)
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want 0600", e.Name(), fi.Mode().Perm(), err)
		}
	}
	if len(entries) != 2 { // the entry and its lock file
		t.Errorf("%d files, want 2", len(entries))
	}
	// A symbolic link in place of the directory is refused.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(h.cache, link); err != nil {
		t.Fatal(err)
	}
	h.opts.Dir = link
	if _, err := h.call(kubectlA, execInfoEnv(t, execcred.V1, nil, nil)); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("symlinked cache directory: %v", err)
	}
}

// wrapperProcess runs the test binary as the wrapper, as the child of a shell of its own
// (a client process of its own), or as a direct child of the test when sameParent.
func wrapperProcess(ctx context.Context, env []string, sameParent bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `"$0" -test.run='^$'; exit $?`, os.Args[0])
	if sameParent {
		cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	}
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("wrapper: %w: %s", err, stderr.String())
	}
	return string(out), nil
}

// TestRunConcurrentProcesses: 20 wrapper processes at once, each with a client process of
// its own, make one run of a slow plugin and print the same answer.
func TestRunConcurrentProcesses(t *testing.T) {
	t.Parallel()
	p := fakePlugin(t).Sleep(300 * time.Millisecond)
	cache := filepath.Join(t.TempDir(), "cache")
	env := append(append(os.Environ(), p.Env()...), wrapperEnv+"="+cache, execInfoEnv(t, execcred.V1, nil, nil))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		outs = map[string]int{}
	)
	for range 20 {
		wg.Go(func() {
			out, err := wrapperProcess(t.Context(), env, false)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
			}
			outs[out]++
		})
	}
	wg.Wait()
	if p.Runs() != 1 || len(outs) != 1 || outs[answer(execcred.V1, "none", 1, "")] != 20 {
		t.Errorf("20 concurrent wrappers: %d plugin runs, answers %v", p.Runs(), outs)
	}
}

// TestRunSameParentRefreshes: the client is really the wrapper's parent process. Called
// twice by the same process, the second call is a refresh; a sibling client is served.
func TestRunSameParentRefreshes(t *testing.T) {
	t.Parallel()
	p := fakePlugin(t)
	cache := filepath.Join(t.TempDir(), "cache")
	env := append(append(os.Environ(), p.Env()...), wrapperEnv+"="+cache, execInfoEnv(t, execcred.V1, nil, nil))
	for i, c := range []struct {
		sameParent bool
		runs       int
	}{{true, 1}, {false, 1}, {true, 2}, {false, 2}} {
		out, err := wrapperProcess(t.Context(), env, c.sameParent)
		if want := answer(execcred.V1, "none", c.runs, ""); err != nil || out != want || p.Runs() != c.runs {
			t.Errorf("call %d (from the test process: %v): %q, %v after %d runs, want %q", i, c.sameParent, out, err, p.Runs(), want)
		}
	}
}

// TestRunConcurrentGoroutines: the lock also holds between goroutines of one process.
func TestRunConcurrentGoroutines(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.plugin.Sleep(100 * time.Millisecond)
	info := execInfoEnv(t, execcred.V1, nil, nil)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			var out bytes.Buffer
			o := h.opts
			o.Environ = append(h.plugin.Env(), info)
			o.Stdout, o.Stderr, o.Client = &out, &bytes.Buffer{}, Client{PID: 2000 + i}
			if err := Run(t.Context(), o); err != nil || out.String() != answer(execcred.V1, "none", 1, "") {
				t.Errorf("goroutine %d: %q, %v", i, out.String(), err)
			}
		})
	}
	wg.Wait()
	if h.plugin.Runs() != 1 {
		t.Errorf("%d runs, want 1", h.plugin.Runs())
	}
}

func TestListAndClear(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.plugin.Stdout(answerTemplate(h.now.Add(time.Hour).Format(time.RFC3339)))
	for _, server := range []string{"https://a:6443", "https://b:6443"} {
		if _, err := h.call(kubectlA, execInfoEnv(t, execcred.V1, &execcred.Cluster{Server: server, Config: []byte("null")}, nil)); err != nil {
			t.Fatal(err)
		}
	}
	h.opts.Args = []string{"-test.run=^$", "--client-secret", "s3cr3t", "--password=hunter2"}
	if _, err := h.call(kubectlB, execInfoEnv(t, execcred.V1, nil, nil)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.cache, "0123456789abcdef0123456789abcdef.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	listed, err := List(h.cache, h.now, "")
	if err != nil {
		t.Fatal(err)
	}
	var servers, args []string
	corrupt := 0
	for _, l := range listed {
		if l.Corrupt {
			corrupt++
			continue
		}
		servers = append(servers, l.Server)
		if !l.Servable || l.Clients != 1 || !strings.HasPrefix(l.Credential, "token (") {
			t.Errorf("entry %+v", l)
		}
		if len(l.Args) > 1 {
			args = l.Args
		}
	}
	if corrupt != 1 || len(servers) != 3 {
		t.Errorf("listed %d corrupt, servers %v", corrupt, servers)
	}
	if want := []string{"-test.run=^$", "--client-secret", "<redacted>", "--password=<redacted>"}; strings.Join(args, " ") != strings.Join(want, " ") {
		t.Errorf("listed args %q, want %q", args, want)
	}
	n, err := Clear(t.Context(), h.cache, nil, os.Args[0], []string{"-test.run=^$"})
	if err != nil || n != 2 {
		t.Errorf("clear of one command: %d, %v; want its 2 entries", n, err)
	}
	n, err = Clear(t.Context(), h.cache, nil, "", nil)
	if err != nil || n != 2 {
		t.Errorf("clear all: %d, %v; want the other entry and the corrupt one", n, err)
	}
	if len(h.entryFiles()) != 0 {
		t.Errorf("left %v", h.entryFiles())
	}
}

// TestRunDoesNotStoreProxyAnswers: an exec proxy answer names a running proxy, so it is
// passed on but never stored.
func TestRunDoesNotStoreProxyAnswers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	client, err := testpki.NewTestCA(t, "execcache-test-ca").IssueClient("proxy-client", "proxy-client")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := client.CertPEM, client.KeyPEM
	answer, err := json.Marshal(map[string]any{
		"apiVersion": execcred.V1, "kind": "ExecCredential",
		"status": map[string]any{
			"clientCertificateData": string(certPEM), "clientKeyData": string(keyPEM),
			"proxyConfig": map[string]any{"url": "unix:///run/proxy.sock", "certificate-authority-data": certPEM},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.plugin.Stdout(string(answer))
	for i := 1; i <= 2; i++ {
		out, err := h.call(Client{}, execInfoEnv(t, execcred.V1, nil, nil))
		if err != nil || out != string(answer) || h.plugin.Runs() != i || len(h.entryFiles()) != 0 {
			t.Errorf("call %d: %q, %v after %d runs, %d entries", i, out, err, h.plugin.Runs(), len(h.entryFiles()))
		}
	}
}

// TestRunSweepsUnservableEntries: a miss removes the entries of other keys that can no
// longer be served, and unfinished writes a crash left, so that credentials do not pile up.
func TestRunSweepsUnservableEntries(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	prod := execInfoEnv(t, execcred.V1, &execcred.Cluster{Server: "https://prod:6443", Config: []byte("null")}, nil)
	dev := execInfoEnv(t, execcred.V1, &execcred.Cluster{Server: "https://dev:6443", Config: []byte("null")}, nil)
	if _, err := h.call(Client{}, prod); err != nil { // served for the default TTL, an hour
		t.Fatal(err)
	}
	stale := filepath.Join(h.cache, ".tmp-crashed")
	if err := os.WriteFile(stale, []byte(`{"token":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	h.now = h.now.Add(30 * time.Minute) // prod's entry is still served: kept
	if _, err := h.call(Client{}, dev); err != nil {
		t.Fatal(err)
	}
	if n := len(h.entryFiles()); n != 2 {
		t.Errorf("%d entries after a miss while the other was servable, want 2", n)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an old unfinished write was left: %v", err)
	}
	h.now = h.now.Add(65 * time.Minute) // both expired; the miss for dev sweeps prod's
	if _, err := h.call(Client{}, dev); err != nil {
		t.Fatal(err)
	}
	files := h.entryFiles()
	var e entry
	if len(files) != 1 {
		t.Fatalf("entries %v after a miss with the other expired, want dev's alone", files)
	}
	if b, err := os.ReadFile(files[0]); err != nil || json.Unmarshal(b, &e) != nil || e.Server != "https://dev:6443" {
		t.Errorf("the entry left is %s (%v), want dev's", e.Server, err)
	}
}

// signingAnswer is a plugin's answer with KEP-6308 signing material, and the private key
// in it, to look for where it must not be.
func signingAnswer(t *testing.T) (answer, key string) {
	t.Helper()
	kp, err := testpki.NewTestCA(t, "execcache-signing-ca").IssueClient("signer", "signer")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{
		"apiVersion": execcred.V1, "kind": "ExecCredential",
		"status": map[string]any{"httpSignature": map[string]any{
			"privateKey": string(kp.KeyPEM), "certificate": string(kp.CertPEM),
			"signedHeaders": map[string]string{"X-K8s-Audience": "https://k.example", "X-Session-Token": "session-s3cr3t"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b), string(kp.KeyPEM)
}

// signingInfoEnv is the KUBERNETES_EXEC_INFO of a client that signs requests.
func signingInfoEnv(t *testing.T) string {
	t.Helper()
	b, err := (&wire.Info{APIVersion: execcred.V1, HTTPSignature: &wire.HTTPSignatureRequest{
		SignedHeaders: []wire.HTTPSignatureHeader{{Name: "X-K8s-Audience"}},
	}}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	return wire.InfoEnv + "=" + string(b)
}

// TestRunKeepsKeyMaterialOut: signing material (status.httpSignature, KEP-6308) is passed
// on and never written down, whether or not the client asked for it; and a client that
// asks for it (spec.httpSignature) is never served a stored answer, nor leaves one. Each
// call runs the plugin: the second would be a hit if anything had been stored.
func TestRunKeepsKeyMaterialOut(t *testing.T) {
	t.Parallel()
	signing, key := signingAnswer(t)
	for _, tc := range []struct {
		name, answer string
		info         func(*testing.T) string
	}{
		{"signing material a client did not ask for", signing, func(t *testing.T) string { return execInfoEnv(t, execcred.V1, nil, nil) }},
		{"signing material a client asked for", signing, signingInfoEnv},
		{"a token answer to a client that asked for signing material", answer(execcred.V1, "none", 1, ""), signingInfoEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.plugin.Stdout(tc.answer)
			for i, client := range []Client{kubectlA, kubectlB} {
				out, err := h.call(client, tc.info(t))
				if err != nil || out != tc.answer {
					t.Fatalf("call %d: %q, %v", i, out, err)
				}
			}
			if n := h.plugin.Runs(); n != 2 || len(h.entryFiles()) != 0 {
				t.Errorf("%d runs and %d entries, want 2 runs and no entry", n, len(h.entryFiles()))
			}
			if files := append(filesHolding(t, h.cache, key), filesHolding(t, h.cache, tc.answer)...); len(files) != 0 {
				t.Errorf("the answer or its private key is on disk in %v", files)
			}
			if listed, err := List(h.cache, h.now, ""); err != nil || len(listed) != 0 {
				t.Errorf("List = %+v, %v; want nothing", listed, err)
			}
		})
	}
}
