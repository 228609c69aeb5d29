package execcache

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stormCall is one client's call: kplug-exec-cache as a process of its own (the test
// binary as the program, Main), started by a shell that stands for the client, with the
// terminal as stdin or none (a desktop client).
type stormCall struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

// startCall starts a client's call of kplug-exec-cache with env, stdin tty (nil: none).
func startCall(t *testing.T, env []string, tty *os.File, cache string) *stormCall {
	t.Helper()
	c := &stormCall{}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	c.cmd = exec.CommandContext(ctx, "sh", "-c", `"$0" "$@"; exit $?`, os.Args[0],
		"--cache-dir", cache, "--failure-window", "10m", "--", os.Args[0], "-test.run=^$")
	c.cmd.Env = append(env, programEnv+"=1")
	// A test that ends early stops the call as a client's timeout does: SIGTERM to the
	// shell and kplug-exec-cache (one process group), which then stops its plugin's.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.cmd.Cancel = func() error { return syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM) }
	c.cmd.WaitDelay = 10 * time.Second
	if tty != nil {
		c.cmd.Stdin = tty
	}
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

// wait returns the call's exit code.
func (c *stormCall) wait() int {
	_ = c.cmd.Wait()
	return c.cmd.ProcessState.ExitCode()
}

// storm starts n calls at once, every other one from a terminal, and waits for them.
func storm(t *testing.T, n int, env func(interactive bool) []string, tty *os.File, cache string, started func([]*stormCall)) []*stormCall {
	t.Helper()
	calls := make([]*stormCall, n)
	for i := range calls {
		var stdin *os.File
		if i%2 == 0 {
			stdin = tty
		}
		calls[i] = startCall(t, env(stdin != nil), stdin, cache)
	}
	if started != nil {
		started(calls)
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() { c.wait() })
	}
	wg.Wait()
	return calls
}

// running reports whether the call's kplug-exec-cache process (the client shell's child)
// has started.
func (c *stormCall) running() bool {
	pid := strconv.Itoa(c.cmd.Process.Pid)
	children, err := os.ReadFile(filepath.Join("/proc", pid, "task", pid, "children"))
	if err != nil {
		return false
	}
	for _, child := range strings.Fields(string(children)) {
		if exe, err := os.Readlink(filepath.Join("/proc", child, "exe")); err == nil && exe == testBinary() {
			return true
		}
	}
	return false
}

// testBinary is the test binary's path, as /proc/PID/exe shows it.
func testBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		return resolved
	}
	return exe
}

// TestLoginStorm (issue 14: kubelogin#389, #904, #1330): many clients at once while an
// interactive login fails or is cancelled (an IDE's background refresh, k9s, a shell loop,
// twenty kubectl commands from a script) cause one run of the plugin: each is a
// kplug-exec-cache process of its own, with a client process of its own, all started
// while the login holds the entry, and every one, at a terminal or not, is answered with
// that failure, within the failure window, instead of opening a browser or prompting
// again. --clear ends the window, and so does a success: the next storm makes one run and
// shares its answer.
func TestLoginStorm(t *testing.T) {
	t.Parallel()
	const callers = 16
	tty := terminal(t)
	p := fakePlugin(t).Hold().Exit(3).Stderr("login failed\n")
	cache := filepath.Join(t.TempDir(), "cache")
	home := t.TempDir() // no kuberc
	env := func(interactive bool) []string {
		return append(append(os.Environ(), p.Env()...), "HOME="+home, "KUBERC=off", infoEnv(t, interactive))
	}

	// The login, at a terminal: it holds the entry's lock while the plugin prompts.
	login := startCall(t, env(true), tty, cache)
	for p.Runs() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	calls := storm(t, callers, env, tty, cache, func(calls []*stormCall) {
		// Every caller is running, and has had the time to reach the lock (its file lock
		// is taken by polling, so the waiters cannot be seen), before the login fails.
		deadline := time.Now().Add(time.Minute)
		for i, c := range calls {
			for !c.running() {
				if time.Now().After(deadline) {
					t.Errorf("caller %d did not start in a minute", i)
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		time.Sleep(500 * time.Millisecond)
		p.Release() // the login fails: exit code 3
	})
	if code := login.wait(); code != 3 || !strings.Contains(login.stderr.String(), "login failed") {
		t.Fatalf("the login: exit %d, stderr %q; want the plugin's failure", code, login.stderr.String())
	}
	for i, c := range calls {
		if code := c.cmd.ProcessState.ExitCode(); code != 3 || c.stdout.Len() != 0 ||
			!strings.Contains(c.stderr.String(), "failed with exit code 3 ") || !strings.Contains(c.stderr.String(), "to spare you another login") {
			t.Errorf("caller %d (terminal: %v): exit %d, stdout %q, stderr %q; want the login's failure", i, i%2 == 0, code, c.stdout.String(), c.stderr.String())
		}
	}
	if n := p.Runs(); n != 1 {
		t.Fatalf("%d callers during a failing login ran the plugin %d times, want 1", callers, n)
	}

	// --clear ends the window: the next storm makes one run, whose success all share.
	if n, err := Clear(t.Context(), cache, env(false), os.Args[0], []string{"-test.run=^$"}); err != nil || n != 1 {
		t.Fatalf("--clear: %d entries, %v", n, err)
	}
	p.Exit(0).Stderr("").Sleep(300 * time.Millisecond)
	calls = storm(t, callers, env, tty, cache, nil)
	for i, c := range calls {
		if c.cmd.ProcessState.ExitCode() != 0 || !strings.Contains(c.stdout.String(), "tok-none-2-") {
			t.Errorf("after --clear, caller %d: exit %d, %q, %q; want run 2's answer", i, c.cmd.ProcessState.ExitCode(), c.stdout.String(), c.stderr.String())
		}
	}
	if n := p.Runs(); n != 2 {
		t.Fatalf("after --clear: %d runs in all, want 2", n)
	}

	// A success ends it too. A login without a terminal fails: callers without one get
	// that failure, a person at a terminal logs in, and then everyone gets that login.
	if _, err := Clear(t.Context(), cache, env(false), os.Args[0], []string{"-test.run=^$"}); err != nil {
		t.Fatal(err)
	}
	p.Exit(4).Sleep(0)
	if code := startCall(t, env(false), nil, cache).wait(); code != 4 {
		t.Fatalf("a failing run without a terminal: exit %d", code)
	}
	desktops := func(bool) []string { return env(false) }
	for i, c := range storm(t, callers/2, desktops, nil, cache, nil) {
		if c.cmd.ProcessState.ExitCode() != 4 || !strings.Contains(c.stderr.String(), "failed with exit code 4 ") {
			t.Errorf("desktop caller %d within the window: exit %d, %q; want the failure", i, c.cmd.ProcessState.ExitCode(), c.stderr.String())
		}
	}
	p.Exit(0)
	if c := startCall(t, env(true), tty, cache); c.wait() != 0 || !strings.Contains(c.stdout.String(), "tok-none-4-tty=true") {
		t.Fatalf("the login at a terminal: exit %d, %q, %q", c.cmd.ProcessState.ExitCode(), c.stdout.String(), c.stderr.String())
	}
	for i, c := range storm(t, callers/2, desktops, nil, cache, nil) {
		if c.cmd.ProcessState.ExitCode() != 0 || !strings.Contains(c.stdout.String(), "tok-none-4-tty=true") {
			t.Errorf("desktop caller %d after the login: exit %d, %q, %q; want the login's answer", i, c.cmd.ProcessState.ExitCode(), c.stdout.String(), c.stderr.String())
		}
	}
	if n := p.Runs(); n != 4 {
		t.Errorf("%d runs in all, want 4: the failed login, the one after --clear, the failure without a terminal, the login", n)
	}
}
