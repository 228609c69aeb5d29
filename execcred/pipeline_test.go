package execcred

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/testlog"
)

func TestCachedUntilStrictlyAfterExpiry(t *testing.T) {
	t.Parallel()
	f := exectest.New(t)
	clk := newClock()
	exp := clk.Now().Add(10 * time.Minute)
	f.Stdout(tokenOutput(V1, "first", exp))
	src := newSource(t, fakeConfig(f, V1), Options{Now: clk.Now, RefreshBefore: -1})

	if got := mustToken(t, src); got != "first" {
		t.Fatalf("token %q", got)
	}
	f.Stdout(tokenOutput(V1, "second", exp.Add(time.Hour)))
	clk.Add(10 * time.Minute) // exactly at expiry: still valid, as in client-go
	if got := mustToken(t, src); got != "first" || f.Runs() != 1 {
		t.Errorf("at expiry: token %q after %d runs, want first after 1", got, f.Runs())
	}
	clk.Add(time.Nanosecond)
	if got := mustToken(t, src); got != "second" || f.Runs() != 2 {
		t.Errorf("after expiry: token %q after %d runs, want second after 2", got, f.Runs())
	}
}

func TestNoExpiryIsCachedForTheProcess(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Stdout(tokenOutput(V1beta1, "forever", time.Time{}))
	clk := newClock()
	src := newSource(t, fakeConfig(f, V1beta1), Options{Now: clk.Now})
	for range 3 {
		mustToken(t, src)
		clk.Add(1000 * time.Hour)
	}
	if f.Runs() != 1 {
		t.Errorf("%d runs, want 1", f.Runs())
	}
}

func TestConcurrentCallersShareOneRun(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Stdout(tokenOutput(V1, "shared", time.Time{})).Sleep(200 * time.Millisecond)
	src := newSource(t, fakeConfig(f, V1), Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			c, err := src.Credential(t.Context(), nil)
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
	if f.Runs() != 1 {
		t.Errorf("50 concurrent callers caused %d runs, want 1", f.Runs())
	}
}

func TestCallerContextEndsWaitNotRun(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Stdout(tokenOutput(V1, "slow", time.Time{})).Sleep(300 * time.Millisecond)
	src := newSource(t, fakeConfig(f, V1), Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := src.Credential(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	// The run went on and its result serves the next caller without another run.
	if got := mustToken(t, src); got != "slow" || f.Runs() != 1 {
		t.Errorf("token %q after %d runs", got, f.Runs())
	}
}

// TestCallerCancellationIsNotAFailure: a caller that gives up neither counts as a failure
// for the Backoff below the Cache nor is remembered: the next caller gets the run's result.
func TestCallerCancellationIsNotAFailure(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var calls atomic.Int32
	src := &cache{Source: &backoff{Initial: time.Hour, Source: SourceFunc(func(ctx context.Context, _ *Rejection) (*Credential, error) {
		calls.Add(1)
		select {
		case <-release:
			return &Credential{Token: "late"}, nil
		case <-ctx.Done(): // the Cache detaches the run from its callers: never
			return nil, ctx.Err()
		}
	})}}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := src.Credential(ctx, nil); !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "execcred: waiting for the credential plugin: ") {
		t.Fatalf("canceled caller: %v", err)
	}
	close(release)
	if got := mustToken(t, src); got != "late" || calls.Load() != 1 {
		t.Errorf("after a canceled caller: %q after %d calls, want late after 1", got, calls.Load())
	}
}

func TestRefreshAfter401(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Stdout(tokenOutput(V1, "old", time.Time{}))
	src := newSource(t, fakeConfig(f, V1), Options{})
	ctx := t.Context()
	used := mustCred(t, src)
	f.Stdout(tokenOutput(V1, "new", time.Time{}))
	rejected := &Rejection{Credential: used, Response: &Response{Code: 401, Header: http.Header{}}}
	fresh, err := src.Credential(ctx, rejected)
	if err != nil || fresh.Token != "new" {
		t.Fatalf("refresh: %v, %v", fresh, err)
	}
	// Another 401 for the same old credential does not run the plugin again.
	again, err := src.Credential(ctx, rejected)
	if err != nil || again != fresh || f.Runs() != 2 {
		t.Errorf("second refresh for the old generation: %v %v, %d runs (want 2)", again, err, f.Runs())
	}
}

func TestFailedRefreshKeepsOldCredential(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Stdout(tokenOutput(V1, "old", time.Time{}))
	src := newSource(t, fakeConfig(f, V1), Options{})
	used := mustCred(t, src)
	f.Stdout("not json")
	if _, err := src.Credential(t.Context(), &Rejection{Credential: used, Response: &Response{Code: 401}}); err == nil {
		t.Fatal("refresh with garbage output succeeded")
	}
	if got := mustToken(t, src); got != "old" {
		t.Errorf("after a failed refresh the token is %q, want old", got)
	}
}

func TestRefreshAheadOfExpiry(t *testing.T) {
	t.Parallel()
	f := exectest.New(t)
	clk := newClock()
	f.Stdout(tokenOutput(V1, "first", clk.Now().Add(10*time.Minute)))
	src := newSource(t, fakeConfig(f, V1), Options{Now: clk.Now, RefreshBefore: time.Minute})
	mustToken(t, src)
	f.Stdout(tokenOutput(V1, "second", clk.Now().Add(20*time.Minute)))
	clk.Add(8 * time.Minute) // 2 minutes left: not yet due
	if mustToken(t, src); f.Runs() != 1 {
		t.Fatalf("refreshed %d times before it was due", f.Runs()-1)
	}
	clk.Add(90 * time.Second) // 30 s left: due; the old token is served meanwhile
	if got := mustToken(t, src); got != "first" {
		t.Errorf("token while refreshing ahead = %q, want first", got)
	}
	poll.Until(t, "the refresh ahead of expiry", func() bool { return f.Runs() == 2 })
	poll.Until(t, "the new token", func() bool { return mustToken(t, src) == "second" })
}

// TestRefreshAheadFailureIsLogged: a failed refresh ahead of expiry is logged once (nobody
// else sees it), the old credential is served, and the Backoff below refusing the next
// attempts is not logged again.
func TestRefreshAheadFailureIsLogged(t *testing.T) {
	t.Parallel()
	f := exectest.New(t)
	clk := newClock()
	f.Stdout(tokenOutput(V1, "first", clk.Now().Add(10*time.Minute)))
	var logs testlog.Buffer
	src := newSource(t, fakeConfig(f, V1), Options{
		Now: clk.Now, Backoff: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	mustToken(t, src)
	f.Exit(3)
	clk.Add(9*time.Minute + 30*time.Second) // due
	if got := mustToken(t, src); got != "first" {
		t.Errorf("token %q, want first", got)
	}
	poll.Until(t, "the failed refresh logged", func() bool { return strings.Contains(logs.String(), "exited with code 3") })
	for range 5 {
		if got := mustToken(t, src); got != "first" {
			t.Errorf("token %q, want first", got)
		}
	}
	if f.Runs() != 2 {
		t.Errorf("%d runs, want 2: no refresh while the backoff holds", f.Runs())
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
	}
}

func TestBackoffAfterFailure(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Exit(3).Stderr("login required")
	clk := newClock()
	src := newSource(t, fakeConfig(f, V1), Options{Now: clk.Now, Backoff: time.Second, MaxBackoff: 4 * time.Second})
	ctx := t.Context()
	want := `execcred: plugin "` + f.Path() + `" exited with code 3: login required`
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
		_, err := src.Credential(ctx, nil)
		if err == nil || err.Error() != want+step.suffix || f.Runs() != step.wantRuns {
			t.Errorf("step %d: err %v, %d runs; want %q after %d runs", i, err, f.Runs(), want+step.suffix, step.wantRuns)
		}
	}
	var exit *execplugin.ExitError
	var held *BackoffError
	if _, err := src.Credential(ctx, nil); !errors.As(err, &exit) || exit.Code != 3 || !errors.As(err, &held) || held.Failures != 3 {
		t.Errorf("backoff error does not unwrap to the plugin's ExitError: %v", err)
	}
	f.Stdout(tokenOutput(V1, "recovered", time.Time{})).Exit(0).Stderr("")
	clk.Add(time.Hour)
	if got := mustToken(t, src); got != "recovered" {
		t.Errorf("after recovery: %q", got)
	}
}

func TestFailingPluginRunsEveryTimeWithoutBackoff(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Exit(1)
	src := newSource(t, fakeConfig(f, V1), Options{})
	for range 3 {
		if _, err := src.Credential(t.Context(), nil); err == nil {
			t.Fatal("want an error")
		}
	}
	if f.Runs() != 3 {
		t.Errorf("%d runs, want 3 (client-go parity without backoff)", f.Runs())
	}
}

func TestV1alpha1ResponseOnlyOnRefresh(t *testing.T) {
	t.Parallel()
	f := exectest.New(t).Stdout(tokenOutput(V1alpha1, "a", time.Time{}))
	cfg := fakeConfig(f, V1alpha1)
	cfg.Cluster = &Cluster{Server: "https://ignored.example"}
	src := newSource(t, cfg, Options{})
	used := mustCred(t, src)
	rejected := &Rejection{Credential: used, Response: &Response{Code: 401, Header: http.Header{"Www-Authenticate": {`Bearer realm="x"`}}}}
	if _, err := src.Credential(t.Context(), rejected); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1alpha1","spec":{}}` + "\n",
		`{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1alpha1","spec":{"response":{"header":{"Www-Authenticate":["Bearer realm=\"x\""]},"code":401}}}` + "\n",
	}
	if diff := cmp.Diff(want, infos(f)); diff != "" {
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
		p := &Plugin{cfg: Config{InteractiveMode: tt.mode}, host: PluginOptions{
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
	tests := []struct {
		name  string
		fake  func(*exectest.Plugin)
		mode  InteractiveMode
		wantf string // %s is the command
	}{
		{"exit code and stderr", func(p *exectest.Plugin) { p.Exit(2).Stderr("no SSO session\n") }, Never, `execcred: plugin "%s" exited with code 2: no SSO session`},
		{"empty output", func(*exectest.Plugin) {}, Never, `execcred: plugin "%s": plugin wrote nothing to stdout; it must print an ExecCredential with apiVersion client.authentication.k8s.io/v1`},
		{"wrong version", func(p *exectest.Plugin) {
			p.Stdout(`{"apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":"x"}}`)
		}, Never, `execcred: plugin "%s": exec plugin is configured to use API version client.authentication.k8s.io/v1, plugin returned version client.authentication.k8s.io/v1beta1`},
		{"no status", func(p *exectest.Plugin) { p.Stdout(`{"apiVersion":"client.authentication.k8s.io/v1"}`) }, Never, `execcred: plugin "%s": exec plugin didn't return a status field`},
		{"interactive required", func(*exectest.Plugin) {}, Always, `execcred: plugin "%s": exec plugin cannot support interactive mode: standard input is not a terminal`},
	}
	for _, tt := range tests {
		f := exectest.New(t)
		tt.fake(f)
		cfg := fakeConfig(f, V1)
		cfg.InteractiveMode = tt.mode
		_, err := newSource(t, cfg, Options{}).Credential(t.Context(), nil)
		if want := strings.ReplaceAll(tt.wantf, "%s", f.Path()); err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", tt.name, err, want)
		}
		var pe *PluginError
		if !errors.As(err, &pe) {
			t.Errorf("%s: not a *PluginError", tt.name)
		}
	}
}

func TestInstallHintOnNotFound(t *testing.T) {
	t.Parallel()
	src := newSource(t, Config{Command: "kplug-no-such-plugin", APIVersion: V1, InteractiveMode: Never, InstallHint: "brew install thing"}, Options{})
	_, err := src.Credential(t.Context(), nil)
	want := "execcred: plugin \"kplug-no-such-plugin\" not found: no executable \"kplug-no-such-plugin\" in PATH\n\nbrew install thing"
	if err == nil || err.Error() != want {
		t.Errorf("err = %q\nwant %q", err, want)
	}
	if !strings.Contains(err.Error(), "brew install") {
		t.Error("install hint missing")
	}
}

// TestCacheCallsItsSourceOncePerGeneration: a caller that found the Cache empty but
// reached the single-flight only after the first run had ended must take that run's
// credential, not run the plugin again (the benchmark of 1000 cold requests saw 1.03
// plugin runs each, before the Cache looked again inside the flight).
func TestCacheCallsItsSourceOncePerGeneration(t *testing.T) {
	t.Parallel()
	for round := range 200 {
		var calls atomic.Int32
		c := &cache{Source: SourceFunc(func(context.Context, *Rejection) (*Credential, error) {
			calls.Add(1)
			return &Credential{Token: "t"}, nil
		})}
		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() {
				if _, err := c.Credential(t.Context(), nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("round %d: the source was called %d times for one generation", round, n)
		}
	}
}

// Each decorator wraps once: a second WithX of its own result returns that result, as
// oauth2.ReuseTokenSource does; two caches would hide each other's generations.
func TestDecoratorsRefuseADoubleWrap(t *testing.T) {
	base := SourceFunc(func(context.Context, *Rejection) (*Credential, error) { return &Credential{Token: "t"}, nil })
	cached := WithCache(base, CacheOptions{})
	ahead := WithRefreshAhead(cached, RefreshAheadOptions{})
	held := WithBackoff(base, BackoffOptions{Initial: time.Second})
	for name, tc := range map[string]struct{ once, twice Source }{
		"WithCache":        {cached, WithCache(cached, CacheOptions{})},
		"WithRefreshAhead": {ahead, WithRefreshAhead(ahead, RefreshAheadOptions{Before: time.Hour})},
		"WithBackoff":      {held, WithBackoff(held, BackoffOptions{Initial: time.Hour})},
	} {
		if tc.twice != tc.once {
			t.Errorf("%s of its own result: got a new wrapper, want the first one", name)
		}
	}
}
