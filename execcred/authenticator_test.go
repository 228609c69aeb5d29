package execcred

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kplug/kplug/execplugin"
)

func newAuth(t *testing.T, cfg Config, opts Options) *Authenticator {
	t.Helper()
	if opts.Host.Runner == nil {
		opts.Host = quietHost()
	}
	a, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustToken(t *testing.T, a *Authenticator) string {
	t.Helper()
	c, err := a.Credential(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c.Token
}

// waitFor polls cond: background refreshes finish on their own time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestCachedUntilStrictlyAfterExpiry(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	clk := newClock()
	exp := clk.Now().Add(10 * time.Minute)
	f.token(V1, "first", exp)
	a := newAuth(t, f.config(V1), Options{Now: clk.Now, RefreshBefore: -1})

	if got := mustToken(t, a); got != "first" {
		t.Fatalf("token %q", got)
	}
	f.token(V1, "second", exp.Add(time.Hour))
	clk.Add(10 * time.Minute) // exactly at expiry: still valid, as in client-go
	if got := mustToken(t, a); got != "first" || f.runs() != 1 {
		t.Errorf("at expiry: token %q after %d runs, want first after 1", got, f.runs())
	}
	clk.Add(time.Nanosecond)
	if got := mustToken(t, a); got != "second" || f.runs() != 2 {
		t.Errorf("after expiry: token %q after %d runs, want second after 2", got, f.runs())
	}
}

func TestNoExpiryIsCachedForTheProcess(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	clk := newClock()
	f.token(V1beta1, "forever", time.Time{})
	a := newAuth(t, f.config(V1beta1), Options{Now: clk.Now})
	for range 3 {
		mustToken(t, a)
		clk.Add(1000 * time.Hour)
	}
	if f.runs() != 1 {
		t.Errorf("%d runs, want 1", f.runs())
	}
}

func TestConcurrentCallersShareOneRun(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.token(V1, "shared", time.Time{})
	a := newAuth(t, f.config(V1, "FAKE_SLEEP=200ms"), Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			c, err := a.Credential(context.Background())
			if err == nil && c.Token != "shared" {
				err = errors.New("wrong token " + c.Token)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if f.runs() != 1 {
		t.Errorf("50 concurrent callers caused %d runs, want 1", f.runs())
	}
}

func TestCallerContextEndsWaitNotRun(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.token(V1, "slow", time.Time{})
	a := newAuth(t, f.config(V1, "FAKE_SLEEP=300ms"), Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := a.Credential(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	// The run went on and its result serves the next caller without another run.
	if got := mustToken(t, a); got != "slow" || f.runs() != 1 {
		t.Errorf("token %q after %d runs", got, f.runs())
	}
}

func TestRefreshAfter401(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.token(V1, "old", time.Time{})
	a := newAuth(t, f.config(V1), Options{})
	ctx := context.Background()
	used, err := a.Credential(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.token(V1, "new", time.Time{})
	fresh, err := a.Refresh(ctx, used, &http.Response{StatusCode: 401, Header: http.Header{}})
	if err != nil || fresh.Token != "new" {
		t.Fatalf("refresh: %v, %v", fresh, err)
	}
	// Another 401 for the same old credential does not run the plugin again.
	again, err := a.Refresh(ctx, used, &http.Response{StatusCode: 401, Header: http.Header{}})
	if err != nil || again != fresh || f.runs() != 2 {
		t.Errorf("second refresh for the old generation: %v %v, %d runs (want 2)", again, err, f.runs())
	}
}

func TestFailedRefreshKeepsOldCredential(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.token(V1, "old", time.Time{})
	a := newAuth(t, f.config(V1), Options{})
	ctx := context.Background()
	used, _ := a.Credential(ctx)
	f.output("not json")
	if _, err := a.Refresh(ctx, used, &http.Response{StatusCode: 401}); err == nil {
		t.Fatal("refresh with garbage output succeeded")
	}
	if got := mustToken(t, a); got != "old" {
		t.Errorf("after a failed refresh the token is %q, want old", got)
	}
}

func TestRefreshAheadOfExpiry(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	clk := newClock()
	f.token(V1, "first", clk.Now().Add(10*time.Minute))
	a := newAuth(t, f.config(V1), Options{Now: clk.Now, RefreshBefore: time.Minute})
	mustToken(t, a)
	f.token(V1, "second", clk.Now().Add(20*time.Minute))
	clk.Add(8 * time.Minute) // 2 minutes left: not yet due
	if mustToken(t, a); f.runs() != 1 {
		t.Fatalf("refreshed %d times before it was due", f.runs()-1)
	}
	clk.Add(90 * time.Second) // 30 s left: due; the old token is served meanwhile
	if got := mustToken(t, a); got != "first" {
		t.Errorf("token while refreshing ahead = %q, want first", got)
	}
	waitFor(t, "the refresh ahead of expiry", func() bool { return f.runs() == 2 })
	waitFor(t, "the new token", func() bool { return mustToken(t, a) == "second" })
}

func TestBackoffAfterFailure(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	clk := newClock()
	f.exit(3)
	a := newAuth(t, f.config(V1, "FAKE_STDERR=login required"), Options{
		Now: clk.Now, Backoff: Backoff{Initial: time.Second, Max: 4 * time.Second},
	})
	ctx := context.Background()
	want := `execcred: plugin "` + a.plugin.cfg.Command + `" exited with code 3: login required`
	for i, step := range []struct {
		advance  time.Duration
		wantRuns int
		suffix   string
	}{
		{0, 1, ""},
		{500 * time.Millisecond, 1, " (not run again for 500ms after 1 failures)"},
		{500 * time.Millisecond, 2, ""},                                           // 1 s passed: run again, fail again
		{1999 * time.Millisecond, 2, " (not run again for 1ms after 2 failures)"}, // now 2 s
		{time.Millisecond, 3, ""},
	} {
		clk.Add(step.advance)
		_, err := a.Credential(ctx)
		if err == nil || err.Error() != want+step.suffix || f.runs() != step.wantRuns {
			t.Errorf("step %d: err %v, %d runs; want %q after %d runs", i, err, f.runs(), want+step.suffix, step.wantRuns)
		}
	}
	var exit *execplugin.ExitError
	if _, err := a.Credential(ctx); !errors.As(err, &exit) || exit.Code != 3 {
		t.Errorf("backoff error does not unwrap to the plugin's ExitError: %v", err)
	}
	f.token(V1, "recovered", time.Time{})
	f.exit(0)
	clk.Add(time.Hour)
	if got := mustToken(t, a); got != "recovered" {
		t.Errorf("after recovery: %q", got)
	}
}

func TestFailingPluginRunsEveryTimeWithoutBackoff(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	a := newAuth(t, f.config(V1, "FAKE_EXIT=1"), Options{})
	for range 3 {
		if _, err := a.Credential(context.Background()); err == nil {
			t.Fatal("want an error")
		}
	}
	if f.runs() != 3 {
		t.Errorf("%d runs, want 3 (client-go parity without backoff)", f.runs())
	}
}

func TestV1alpha1ResponseOnlyOnRefresh(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.token(V1alpha1, "a", time.Time{})
	cfg := f.config(V1alpha1)
	cfg.Cluster = &Cluster{Server: "https://ignored.example"}
	a := newAuth(t, cfg, Options{})
	used, _ := a.Credential(context.Background())
	rejected := &http.Response{StatusCode: 401, Header: http.Header{"Www-Authenticate": {`Bearer realm="x"`}}}
	if _, err := a.Refresh(context.Background(), used, rejected); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1alpha1","spec":{}}` + "\n",
		`{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1alpha1","spec":{"response":{"header":{"Www-Authenticate":["Bearer realm=\"x\""]},"code":401}}}` + "\n",
	}
	if diff := cmp.Diff(want, f.infos()); diff != "" {
		t.Errorf("KUBERNETES_EXEC_INFO (-want +got):\n%s", diff)
	}
}

func TestInteractiveModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode        InteractiveMode
		tty         bool
		unavailable bool
		want        bool
		wantErr     string
	}{
		{Never, true, false, false, ""},
		{IfAvailable, false, false, false, ""},
		{IfAvailable, true, false, true, ""},
		{IfAvailable, true, true, false, ""},
		{Always, false, true, false, "standard input is not a terminal"}, // the terminal check comes first
		{Always, true, false, true, ""},
		{Always, true, true, false, "standard input is unavailable: used by stdin resource manifest reader"},
		{"Sometimes", true, false, false, `unknown interactiveMode: "Sometimes"`},
	}
	for _, tt := range tests {
		p := &Plugin{cfg: Config{InteractiveMode: tt.mode}, host: Host{
			IsTerminal:              func(*os.File) bool { return tt.tty },
			StdinUnavailable:        tt.unavailable,
			StdinUnavailableMessage: "used by stdin resource manifest reader",
		}}
		got, err := p.interactive()
		if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
			t.Errorf("%s tty=%v unavailable=%v: got %v, %v; want %v, %q", tt.mode, tt.tty, tt.unavailable, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestPluginErrors(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cmd := f.config(V1).Command
	tests := []struct {
		name   string
		cfg    Config
		output string
		want   string
	}{
		{"exit code and stderr", f.config(V1, "FAKE_EXIT=2", "FAKE_STDERR=no SSO session\n"), "", `execcred: plugin "` + cmd + `" exited with code 2: no SSO session`},
		{"empty output", f.config(V1), "", `execcred: plugin "` + cmd + `": plugin wrote nothing to stdout; it must print an ExecCredential with apiVersion client.authentication.k8s.io/v1`},
		{"wrong version", f.config(V1), `{"apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":"x"}}`, `execcred: plugin "` + cmd + `": exec plugin is configured to use API version client.authentication.k8s.io/v1, plugin returned version client.authentication.k8s.io/v1beta1`},
		{"no status", f.config(V1), `{"apiVersion":"client.authentication.k8s.io/v1"}`, `execcred: plugin "` + cmd + `": exec plugin didn't return a status field`},
		{"interactive required", func() Config { c := f.config(V1); c.InteractiveMode = Always; return c }(), "", `execcred: plugin "` + cmd + `": exec plugin cannot support interactive mode: standard input is not a terminal`},
	}
	for _, tt := range tests {
		f.output(tt.output)
		a := newAuth(t, tt.cfg, Options{})
		_, err := a.Credential(context.Background())
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s:\n got %v\nwant %s", tt.name, err, tt.want)
		}
		var pe *PluginError
		if !errors.As(err, &pe) {
			t.Errorf("%s: not a *PluginError", tt.name)
		}
	}
}

func TestInstallHintOnNotFound(t *testing.T) {
	t.Parallel()
	a := newAuth(t, Config{Command: "kplug-no-such-plugin", APIVersion: V1, InteractiveMode: Never, InstallHint: "brew install thing"}, Options{})
	_, err := a.Credential(context.Background())
	want := "execcred: plugin \"kplug-no-such-plugin\" not found: no executable \"kplug-no-such-plugin\" in PATH\n\nbrew install thing"
	if err == nil || err.Error() != want {
		t.Errorf("err = %q\nwant %q", err, want)
	}
	if !strings.Contains(err.Error(), "brew install") {
		t.Error("install hint missing")
	}
}
