//go:build unix

package execplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// quietRunner hides plugin stderr from the test output and records calls.
type recorder struct {
	calls  []Call
	stderr bytes.Buffer
}

func (r *recorder) runner() *Runner {
	return &Runner{Stderr: &r.stderr, KillGrace: 300 * time.Millisecond, Observe: func(c Call) { r.calls = append(r.calls, c) }}
}

func (r *recorder) only(t *testing.T) Call {
	t.Helper()
	if len(r.calls) != 1 {
		t.Fatalf("Observe called %d times, want 1", len(r.calls))
	}
	return r.calls[0]
}

func TestRunReturnsStdout(t *testing.T) {
	t.Parallel()
	var rec recorder
	res, err := rec.runner().Run(t.Context(), fakePlugin(t, "print", "a b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Stdout), "a b\nc\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	c := rec.only(t)
	if c.Status != StatusOK || c.ExitCode != 0 || !c.Started || c.Path != os.Args[0] {
		t.Errorf("call = %+v, want ok, code 0, started, path %s", c, os.Args[0])
	}
}

func TestEnvironmentPrecedence(t *testing.T) {
	t.Parallel()
	r := &Runner{Environ: func() []string {
		return []string{"A=host", "B=host", "KUBERNETES_EXEC_INFO=host", "PATH=/usr/bin"}
	}}
	cmd := fakePlugin(t, "env", "A", "B", "C", "KUBERNETES_EXEC_INFO", "PATH", "UNSET")
	cmd.Env = append(cmd.Env, "B=caller", "KUBERNETES_EXEC_INFO=caller", "C=first", "C=second")
	cmd.Reserved = []string{"KUBERNETES_EXEC_INFO=reserved"}
	res, err := r.Run(t.Context(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	want := "A 1 host\nB 1 caller\nC 1 second\nKUBERNETES_EXEC_INFO 1 reserved\nPATH 1 /usr/bin\nUNSET 0 \n"
	if diff := cmp.Diff(want, string(res.Stdout)); diff != "" {
		t.Errorf("plugin environment (-want +got):\n%s", diff)
	}
}

func TestInvalidEnvironmentEntry(t *testing.T) {
	t.Parallel()
	var rec recorder
	cmd := fakePlugin(t, "print")
	cmd.Env = append(cmd.Env, "NOVALUE")
	_, err := rec.runner().Run(t.Context(), cmd)
	want := fmt.Sprintf(`plugin %q: invalid environment entry "NOVALUE": want NAME=VALUE`, os.Args[0])
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
	if c := rec.only(t); c.Status != StatusInternal || c.Started {
		t.Errorf("call = %+v, want internal_error, not started", c)
	}
}

func TestStdinModes(t *testing.T) {
	t.Parallel()
	terminal, err := os.CreateTemp(t.TempDir(), "tty")
	if err != nil {
		t.Fatal(err)
	}
	defer terminal.Close()
	if _, err := terminal.WriteString("typed at the prompt"); err != nil {
		t.Fatal(err)
	}
	if _, err := terminal.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		stdin Stdin
		want  string
	}{
		{"null device by default", Stdin{}, "null=true pgrp-same=false\n"},
		{"given bytes", BytesStdin([]byte(`{"apiVersion":"v1"}`)), "null=false pgrp-same=false\n" + `{"apiVersion":"v1"}`},
		// The terminal is handed over as it is, and the plugin stays in our process group
		// so that reading it does not stop the plugin with SIGTTIN.
		{"terminal", TerminalStdin(terminal), "null=false pgrp-same=true\ntyped at the prompt"},
	}
	for _, tt := range tests {
		cmd := fakePlugin(t, "stdin")
		cmd.Stdin = tt.stdin
		res, err := (&Runner{}).Run(t.Context(), cmd)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := string(res.Stdout); got != tt.want {
			t.Errorf("%s: plugin saw %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestNonInteractivePluginLeadsItsOwnProcessGroup(t *testing.T) {
	t.Parallel()
	res, err := (&Runner{}).Run(t.Context(), fakePlugin(t, "pgrp"))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout); got != "own-group=true\n" {
		t.Errorf("plugin says %q, want own-group=true", got)
	}
}

func TestTimeoutKillsPlugin(t *testing.T) {
	t.Parallel()
	for _, ignoreTerm := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignore SIGTERM %v", ignoreTerm), func(t *testing.T) {
			t.Parallel()
			var rec recorder
			pidFile := filepath.Join(t.TempDir(), "pid")
			cmd := fakePlugin(t, "hang", pidFile)
			if ignoreTerm {
				cmd.Args = append(cmd.Args, "ignore-term")
			}
			cmd.Timeout = 500 * time.Millisecond
			_, err := rec.runner().Run(t.Context(), cmd)
			var te *TimeoutError
			if !errors.As(err, &te) {
				t.Fatalf("err = %v, want a TimeoutError", err)
			}
			want := fmt.Sprintf("plugin %q timed out after 500ms and was killed: waiting for the browser login...", os.Args[0])
			if err.Error() != want {
				t.Errorf("err = %q\nwant  %q", err, want)
			}
			waitGone(t, readPID(t, pidFile))
			if c := rec.only(t); c.Status != StatusTimeout || c.ExitCode != -1 {
				t.Errorf("call = %+v, want timeout with code -1", c)
			}
		})
	}
}

func TestTimeoutKillsGrandchildHoldingStdout(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := fakePlugin(t, "grandchild", pidFile, "hang")
	cmd.Timeout = 500 * time.Millisecond
	var rec recorder
	_, err := rec.runner().Run(t.Context(), cmd)
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want a TimeoutError", err)
	}
	waitGone(t, readPID(t, pidFile))
}

func TestGrandchildHoldingStdoutAfterExitIsKilled(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	var rec recorder
	_, err := rec.runner().Run(t.Context(), fakePlugin(t, "grandchild", pidFile, "exit"))
	var he *OutputHeldError
	if !errors.As(err, &he) {
		t.Fatalf("err = %v, want an OutputHeldError", err)
	}
	if !strings.Contains(err.Error(), "kept its stdout open for more than 300ms") {
		t.Errorf("err = %q, want it to say what held the output and for how long", err)
	}
	waitGone(t, readPID(t, pidFile))
	if c := rec.only(t); c.Status != StatusOutputHeld || c.ExitCode != 0 {
		t.Errorf("call = %+v, want output_held with exit code 0", c)
	}
}

func TestCancelKillsPlugin(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	var rec recorder
	go func() {
		_, err := rec.runner().Run(ctx, fakePlugin(t, "hang", pidFile, "ignore-term"))
		done <- err
	}()
	pid := readPID(t, pidFile)
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if want := fmt.Sprintf("plugin %q was stopped: context canceled", os.Args[0]); err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	waitGone(t, pid)
}

func TestOutputCap(t *testing.T) {
	t.Parallel()
	var rec recorder
	res, err := rec.runner().Run(t.Context(), fakePlugin(t, "flood", strconv.Itoa(DefaultMaxOutput)))
	if err != nil {
		t.Fatalf("output of exactly the default cap: %v", err)
	}
	if len(res.Stdout) != DefaultMaxOutput {
		t.Errorf("got %d bytes, want %d", len(res.Stdout), DefaultMaxOutput)
	}

	_, err = rec.runner().Run(t.Context(), fakePlugin(t, "flood", strconv.Itoa(DefaultMaxOutput+1), "hang"))
	var oe *OutputTooLargeError
	if !errors.As(err, &oe) || oe.Limit != DefaultMaxOutput {
		t.Fatalf("err = %v, want an OutputTooLargeError with limit %d", err, DefaultMaxOutput)
	}
	if want := fmt.Sprintf("plugin %q wrote more than 4 MiB to stdout and was killed", os.Args[0]); err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}

	cmd := fakePlugin(t, "flood", "5000", "hang")
	cmd.MaxOutput = 4096
	_, err = rec.runner().Run(t.Context(), cmd)
	if !errors.As(err, &oe) || oe.Limit != 4096 {
		t.Errorf("err = %v, want an OutputTooLargeError with limit 4096", err)
	}
	if got := rec.calls[len(rec.calls)-1].Status; got != StatusOutputTooLarge {
		t.Errorf("status = %s, want %s", got, StatusOutputTooLarge)
	}
}

func TestExitError(t *testing.T) {
	t.Parallel()
	var rec recorder
	res, err := rec.runner().Run(t.Context(), fakePlugin(t, "exit", "3", "error: token expired\n"))
	if res != nil {
		t.Errorf("a failed run returned a result: %q", res.Stdout)
	}
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v, want an ExitError", err)
	}
	if ee.Code != 3 || ee.Signal != nil || ee.Stderr != "error: token expired\n" {
		t.Errorf("ExitError = %+v", ee)
	}
	if want := fmt.Sprintf("plugin %q exited with code 3: error: token expired", os.Args[0]); err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if got := rec.stderr.String(); got != "error: token expired\n" {
		t.Errorf("host stderr = %q, want the plugin's stderr passed through", got)
	}
	if c := rec.only(t); c.Status != StatusExitError || c.ExitCode != 3 {
		t.Errorf("call = %+v, want exit_error with code 3", c)
	}
}

func TestDeathBySignal(t *testing.T) {
	t.Parallel()
	var rec recorder
	_, err := rec.runner().Run(t.Context(), fakePlugin(t, "signal"))
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v, want an ExitError", err)
	}
	if ee.Code != -1 || ee.Signal != syscall.SIGKILL {
		t.Errorf("code %d signal %v, want -1 and SIGKILL", ee.Code, ee.Signal)
	}
	if want := fmt.Sprintf("plugin %q was killed by signal killed", os.Args[0]); err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if c := rec.only(t); c.Status != StatusExitError || c.ExitCode != -1 {
		t.Errorf("call = %+v, want exit_error with code -1", c)
	}
}

func TestStderrTailIsBounded(t *testing.T) {
	t.Parallel()
	var rec recorder
	const total = 100 << 10
	_, err := rec.runner().Run(t.Context(), fakePlugin(t, "stderr", strconv.Itoa(total)))
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v, want an ExitError", err)
	}
	if len(ee.Stderr) != DefaultStderrTail {
		t.Errorf("kept %d bytes of stderr, want %d", len(ee.Stderr), DefaultStderrTail)
	}
	lastLine := fmt.Sprintf("line %06d", (total+11)/len("line 000000\n")-1)
	if !strings.HasSuffix(ee.Stderr, lastLine+"\n") || !strings.HasSuffix(err.Error(), lastLine) {
		t.Errorf("stderr tail and message should end with %q; message %q", lastLine, err.Error())
	}
	if len(err.Error()) > maxStderrInMessage+len(os.Args[0])+64 {
		t.Errorf("message is %d bytes long; the stderr part should be bounded", len(err.Error()))
	}
	if got := rec.stderr.Len(); got < total {
		t.Errorf("host stderr got %d bytes, want all %d", got, total)
	}
}

func TestCommandResolution(t *testing.T) {
	dir := t.TempDir()
	mustSymlink(t, os.Args[0], filepath.Join(dir, "bin", "kplug-fake-plugin"))
	t.Setenv("PATH", filepath.Join(dir, "bin"))

	tests := []struct {
		name     string
		path     string
		baseDir  string
		wantPath string
	}{
		{"absolute", filepath.Join(dir, "bin", "kplug-fake-plugin"), "/elsewhere", filepath.Join(dir, "bin", "kplug-fake-plugin")},
		{"relative to the base directory", "bin/kplug-fake-plugin", dir, filepath.Join(dir, "bin", "kplug-fake-plugin")},
		{"relative with dot", "./bin/../bin/kplug-fake-plugin", dir, filepath.Join(dir, "bin", "kplug-fake-plugin")},
		{"bare name through PATH", "kplug-fake-plugin", "/elsewhere", filepath.Join(dir, "bin", "kplug-fake-plugin")},
	}
	for _, tt := range tests {
		cmd := fakePlugin(t, "print", "ran")
		cmd.Path, cmd.BaseDir = tt.path, tt.baseDir
		res, err := (&Runner{}).Run(t.Context(), cmd)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if res.Path != tt.wantPath || string(res.Stdout) != "ran\n" {
			t.Errorf("%s: ran %s with output %q, want %s", tt.name, res.Path, res.Stdout, tt.wantPath)
		}
	}
}

func TestNotFound(t *testing.T) {
	dir := t.TempDir()
	mustSymlink(t, os.Args[0], filepath.Join(dir, "cwd", "only-here"))
	t.Chdir(filepath.Join(dir, "cwd"))
	t.Setenv("PATH", ".")

	tests := []struct {
		name, path, baseDir, want string
	}{
		{"bare name", "kplug-no-such-plugin", "", `plugin "kplug-no-such-plugin" not found: no executable "kplug-no-such-plugin" in PATH`},
		{"absolute", "/nonexistent/kplug-plugin", "", `plugin "/nonexistent/kplug-plugin" not found: /nonexistent/kplug-plugin does not exist`},
		{"relative", "bin/plugin", dir, fmt.Sprintf(`plugin "bin/plugin" not found: %s/bin/plugin does not exist`, dir)},
		{"current directory is not searched", "only-here", "", `plugin "only-here" not found: it is only in the current directory, which is not searched; give its path, e.g. ./only-here`},
	}
	for _, tt := range tests {
		var rec recorder
		_, err := rec.runner().Run(t.Context(), Command{Path: tt.path, BaseDir: tt.baseDir, InstallHint: "brew install kplug-plugin"})
		var nf *NotFoundError
		if !errors.As(err, &nf) {
			t.Errorf("%s: err = %v, want a NotFoundError", tt.name, err)
			continue
		}
		if err.Error() != tt.want || nf.InstallHint != "brew install kplug-plugin" {
			t.Errorf("%s: err = %q (hint %q)\nwant %q", tt.name, err, nf.InstallHint, tt.want)
		}
		if c := rec.only(t); c.Status != StatusNotFound || c.Started {
			t.Errorf("%s: call = %+v, want not_found, not started", tt.name, c)
		}
	}
}

func TestNotExecutable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noExec := write("noexec", "#!/bin/sh\necho hi\n", 0o644)
	badInterp := write("badinterp", "#!/nonexistent/interpreter\n", 0o755)
	garbage := write("garbage", "\x00\x01\x02\x03 not a program", 0o755)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	// An absolute command names its path once.
	tests := []struct{ path, want string }{
		{noExec, fmt.Sprintf(`plugin %q cannot be executed: permission denied (the file is not marked executable)`, noExec)},
		{dir, fmt.Sprintf(`plugin %q cannot be executed: is a directory`, dir)},
		{fifo, fmt.Sprintf(`plugin %q cannot be executed: is not a regular file`, fifo)},
		{badInterp, fmt.Sprintf(`plugin %q cannot be executed: its interpreter (the #! line) was not found`, badInterp)},
		{garbage, fmt.Sprintf(`plugin %q cannot be executed: exec format error (not a program for this system)`, garbage)},
	}
	for _, tt := range tests {
		var rec recorder
		_, err := rec.runner().Run(t.Context(), Command{Path: tt.path})
		var ne *NotExecutableError
		if !errors.As(err, &ne) || err.Error() != tt.want {
			t.Errorf("err = %v\nwant %s", err, tt.want)
		}
		if c := rec.only(t); c.Status != StatusNotExecutable {
			t.Errorf("%s: status %s, want not_executable", tt.path, c.Status)
		}
	}
}

func TestEnvironmentTooLarge(t *testing.T) {
	t.Parallel()
	// Linux refuses any single string over 128 KiB; macOS refuses 1 MiB in all.
	ca := strings.Repeat("A", 2<<20)
	cmd := fakePlugin(t, "print")
	cmd.Reserved = []string{"KUBERNETES_EXEC_INFO=" + ca}
	var rec recorder
	_, err := rec.runner().Run(t.Context(), cmd)
	var tb *EnvTooLargeError
	if !errors.As(err, &tb) {
		t.Fatalf("err = %v, want an EnvTooLargeError", err)
	}
	if tb.Largest != "KUBERNETES_EXEC_INFO" || tb.LargestSize != len("KUBERNETES_EXEC_INFO=")+len(ca)+1 {
		t.Errorf("largest = %s (%d bytes)", tb.Largest, tb.LargestSize)
	}
	prefix := fmt.Sprintf("plugin %q could not start: its environment is too large for the operating system (", os.Args[0])
	suffix := "); the largest variable is KUBERNETES_EXEC_INFO (2048.0 KiB)"
	if !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), suffix) {
		t.Errorf("err = %q", err)
	}
	if c := rec.only(t); c.Status != StatusEnvTooLarge {
		t.Errorf("status %s, want env_too_large", c.Status)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// readPID waits for a helper to write its pid file.
func readPID(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil {
			pid, err := strconv.Atoi(string(b))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

// waitGone fails the test if pid is still running after a few seconds.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !alive(pid) {
			return
		}
	}
	t.Errorf("process %d is still running: leaked", pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// alive reports whether pid runs. A zombie counts as gone: it holds nothing, and in a
// container nobody may reap an orphan.
func alive(pid int) bool {
	if runtime.GOOS == "linux" {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		i := bytes.LastIndexByte(stat, ')')
		return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func TestAnswerAtEOFLeavesAPluginThatKeepsServing(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := fakePlugin(t, "answer-and-stay", pidFile)
	cmd.AnswerAtEOF = true
	var rec recorder
	res, err := rec.runner().Run(t.Context(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout); got != "{\"status\":{\"proxyConfig\":{}}}\n" {
		t.Errorf("answer %q", got)
	}
	pid := readPID(t, pidFile)
	if !alive(pid) {
		t.Fatal("the plugin was killed after answering")
	}
	// The plugin is the proxy now; its client ends it (here, the test).
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}

func TestAnswerAtEOFStillReportsFailures(t *testing.T) {
	t.Parallel()
	cmd := fakePlugin(t, "exit", "4", "bad")
	cmd.AnswerAtEOF = true
	var rec recorder
	_, err := rec.runner().Run(t.Context(), cmd)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 4 {
		t.Errorf("err = %v, want exit code 4", err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	hang := fakePlugin(t, "hang", pidFile)
	hang.AnswerAtEOF, hang.Timeout = true, 300*time.Millisecond
	_, err = rec.runner().Run(t.Context(), hang)
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Errorf("err = %v, want a timeout", err)
	}
	waitGone(t, readPID(t, pidFile))
	big := fakePlugin(t, "flood", "5000", "hang")
	big.AnswerAtEOF, big.MaxOutput = true, 4096
	_, err = rec.runner().Run(t.Context(), big)
	var oe *OutputTooLargeError
	if !errors.As(err, &oe) {
		t.Errorf("err = %v, want output too large", err)
	}
}
