//go:build linux || darwin

package execcache

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execplugin"
)

// infoEnv is KUBERNETES_EXEC_INFO for a v1 client that says whether it can prompt.
func infoEnv(t *testing.T, interactive bool) string {
	t.Helper()
	b, err := (&wire.Info{APIVersion: wire.V1, Interactive: interactive}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	return wire.InfoEnv + "=" + string(b)
}

func terminal(t *testing.T) *os.File {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { _ = ptmx.Close(); _ = tty.Close() })
	return tty
}

// TestFailureWindow: a failed login is the answer for its entry during the failure window,
// to every caller, so that a failed or cancelled login does not make each other caller
// prompt or open a browser again; a failure without a terminal does not stop a caller that
// has one. The window ends, --clear ends it, and a success replaces it.
func TestFailureWindow(t *testing.T) {
	t.Parallel()
	tty := terminal(t)
	h := newHarness(t)
	h.opts.Stdin = tty
	terminalCaller, desktopCaller := infoEnv(t, true), infoEnv(t, false)

	h.plugin.Exit(3).Stderr("login failed\n")
	_, err := h.call(kubectlA, terminalCaller)
	var exitErr *execplugin.ExitError
	if !errors.As(err, &exitErr) || exitErr.Code != 3 || h.plugin.Runs() != 1 {
		t.Fatalf("the failing login: %v after %d runs", err, h.plugin.Runs())
	}
	h.plugin.Exit(0).Stderr("")
	for _, c := range []struct {
		client Client
		info   string
	}{{kubectlB, terminalCaller}, {kubectlB, desktopCaller}, {kubectlA, terminalCaller}} {
		h.now = h.now.Add(5 * time.Second)
		out, err := h.call(c.client, c.info)
		var recent *RecentFailureError
		if !errors.As(err, &recent) || recent.ExitCode() != 3 || out != "" || h.plugin.Runs() != 1 {
			t.Fatalf("within the window: %q, %v after %d runs; want the failure, no run", out, err, h.plugin.Runs())
		}
		if !strings.Contains(err.Error(), "failed with exit code 3 ") || !strings.Contains(err.Error(), "kplug exec-cache --clear -- ") {
			t.Errorf("message: %v", err)
		}
	}
	// The window ends: the next caller runs the plugin, and its success replaces the failure.
	h.now = h.now.Add(DefaultFailureWindow)
	if out, err := h.call(kubectlB, desktopCaller); err != nil || !strings.Contains(out, "tok-none-2-") {
		t.Fatalf("after the window: %q, %v", out, err)
	}
	if out, err := h.call(kubectlA, desktopCaller); err != nil || !strings.Contains(out, "tok-none-2-") || h.plugin.Runs() != 2 {
		t.Fatalf("the success is served: %q, %v after %d runs", out, err, h.plugin.Runs())
	}

	// A failure without a terminal answers callers without one, not a person at a terminal.
	h.now = h.now.Add(2 * time.Hour) // the entry expired
	h.plugin.Exit(4)
	if _, err := h.call(kubectlA, desktopCaller); !errors.As(err, &exitErr) || exitErr.Code != 4 {
		t.Fatalf("failing run without a terminal: %v", err)
	}
	var recent *RecentFailureError
	if _, err := h.call(kubectlB, desktopCaller); !errors.As(err, &recent) || h.plugin.Runs() != 3 {
		t.Fatalf("another caller without a terminal: %v after %d runs; want the failure", err, h.plugin.Runs())
	}
	h.plugin.Exit(0)
	if out, err := h.call(kubectlB, terminalCaller); err != nil || !strings.Contains(out, "-tty=true") || h.plugin.Runs() != 4 {
		t.Fatalf("a caller at a terminal: %q, %v after %d runs; want the login to run", out, err, h.plugin.Runs())
	}

	// --clear ends a window at once.
	h.now = h.now.Add(2 * time.Hour)
	h.plugin.Exit(5)
	_, _ = h.call(kubectlA, terminalCaller)
	if n, err := Clear(t.Context(), h.cache, h.env, h.opts.Command, h.opts.Args); err != nil || n != 1 {
		t.Fatalf("clear: %d, %v", n, err)
	}
	h.plugin.Exit(0)
	if _, err := h.call(kubectlB, terminalCaller); err != nil || h.plugin.Runs() != 6 {
		t.Fatalf("after --clear: %v after %d runs", err, h.plugin.Runs())
	}
}

// TestFailureWindowCancelled: a login the person cancels (the wrapper is interrupted) is
// remembered as cancelled; with the window off, nothing is.
func TestFailureWindowCancelled(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		h := newHarness(t)
		h.opts.Stdin = terminal(t)
		if off {
			h.opts.Failures = -1
		}
		h.plugin.Hold()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() {
			o := h.opts
			o.Environ = append(h.plugin.Env(), infoEnv(t, true))
			o.Stdout, o.Stderr, o.Client = &bytes.Buffer{}, &bytes.Buffer{}, kubectlA
			o.Now = func() time.Time { return h.now }
			done <- Run(ctx, o)
		}()
		for h.plugin.Runs() == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("an interrupted login succeeded")
		}
		h.plugin.Release()
		_, err := h.call(kubectlB, infoEnv(t, true))
		var recent *RecentFailureError
		switch {
		case off && err != nil:
			t.Errorf("window off: %v, want a fresh run", err)
		case !off && (!errors.As(err, &recent) || !recent.Failure.Cancelled || !strings.Contains(err.Error(), " was cancelled ")):
			t.Errorf("after a cancelled login: %v, want that it was cancelled", err)
		}
	}
}

// TestWaitForLogin: a caller without a terminal whose plugin fails is told what to run in
// a terminal and, with WaitLogin, is served the login done there.
func TestWaitForLogin(t *testing.T) {
	t.Parallel()
	testWaitForLogin(t, newHarness(t))
}

// TestWaitForLoginAcrossAFileSwitch: the login in the terminal may switch an identity
// file (`gcloud auth login` sets the account in the active configuration), which changes
// the key; the waiting caller is served the login all the same.
func TestWaitForLoginAcrossAFileSwitch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	home := t.TempDir()
	h.opts.Command = knownPlugin(t, "gcloud")
	h.env = []string{"HOME=" + home}
	testWaitForLogin(t, h, func() {
		writeIn(t, home, ".config/gcloud/configurations/config_default", "[core]\naccount = a@example.com\n")
	})
}

// testWaitForLogin is TestWaitForLogin with h, whose storage it keeps; login, if not nil,
// is what the person's login in the terminal does besides the plugin's run.
func testWaitForLogin(t *testing.T, h *harness, login ...func()) {
	h.opts.Stdin = terminal(t)
	h.plugin.Exit(3)
	var waiterErr bytes.Buffer
	type result struct {
		out string
		err error
	}
	done := make(chan result)
	go func() {
		var out bytes.Buffer
		o := h.opts
		o.WaitLogin = time.Minute
		o.Environ = append(append(h.plugin.Env(), h.env...), infoEnv(t, false))
		o.Stdout, o.Stderr, o.Client = &out, &waiterErr, kubectlA
		o.Now = func() time.Time { return h.now }
		err := Run(t.Context(), o)
		done <- result{out.String(), err}
	}()
	// The failed run is recorded before the caller starts waiting; only then may the
	// plugin succeed, or the waiter's own run could be the one that succeeds.
	failed := func() bool {
		for _, f := range h.entryFiles() {
			if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(`"failure"`)) {
				return true
			}
		}
		return false
	}
	for !failed() {
		time.Sleep(10 * time.Millisecond)
	}
	h.plugin.Exit(0)
	for _, f := range login {
		f()
	}
	// The person logs in at a terminal; the run without one failed, which does not stop it.
	answer, err := h.call(kubectlB, infoEnv(t, true))
	if err != nil || !strings.Contains(answer, "-tty=true") {
		t.Fatalf("login in the terminal: %q, %v", answer, err)
	}
	r := <-done
	if r.err != nil || r.out != answer {
		t.Fatalf("the waiting caller: %q, %v; want the terminal's login %q", r.out, r.err, answer)
	}
	if msg := waiterErr.String(); !strings.Contains(msg, "ran without a terminal") || !strings.Contains(msg, "waiting up to 1m0s for that login") {
		t.Errorf("the waiting caller's stderr: %q", msg)
	}
	if n := h.plugin.Runs(); n != 2 {
		t.Errorf("%d runs, want 2: the failed one and the login", n)
	}
}
