package execcache

import (
	"bytes"
	connlist "container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/localuser"
	"github.com/kplug/kplug/internal/testkit/testlog"
)

// agentSetup is an agent serving in process, from a kubeconfig naming the fake plugin.
type agentSetup struct {
	t          testing.TB
	plugin     *exectest.Plugin
	dir        string
	socket     string
	cache      string
	kubeconfig string
	log        *testlog.Buffer
	stop       func()
}

// pluginLine is the command line the workstation's kubeconfig names: the fake plugin.
var pluginLine = []string{os.Args[0], "-test.run=^$"}

// startAgent writes a kubeconfig whose user "fake" runs the fake plugin through
// kplug-exec-cache (and whose user "direct" names another line of it directly, with
// provideClusterInfo), and serves it.
func startAgent(t testing.TB, plugin *exectest.Plugin) *agentSetup {
	t.Helper()
	dir := t.TempDir()
	a := &agentSetup{t: t, plugin: plugin, dir: dir, socket: filepath.Join(dir, "agent", "agent.sock"),
		cache: filepath.Join(dir, "cache"), kubeconfig: filepath.Join(dir, "kubeconfig"), log: &testlog.Buffer{}}
	env := ""
	for _, kv := range plugin.Env() {
		name, value, _ := strings.Cut(kv, "=")
		env += fmt.Sprintf("\n      - name: %s\n        value: %q", name, value)
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: one
  cluster:
    server: https://one.example:6443
    certificate-authority-data: %s
    extensions:
    - name: client.authentication.k8s.io/exec
      extension: {audience: one}
- name: two
  cluster: {server: "https://two.example:6443"}
contexts:
- name: fake
  context: {cluster: one, user: fake}
- name: direct-one
  context: {cluster: one, user: direct}
- name: direct-two
  context: {cluster: two, user: direct}
users:
- name: fake
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /usr/local/bin/kplug-exec-cache
      args: [--cache-dir, /elsewhere, --, %q, %q]
      env:%s
- name: direct
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: %q
      args: [%q, cluster]
      provideClusterInfo: true
      env:%s
- name: relative-wrapped
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: kplug-exec-cache
      args: [--, bin/token]
`, "Q0EK", pluginLine[0], pluginLine[1], env, pluginLine[0], pluginLine[1], env)
	if err := os.WriteFile(a.kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Command{}
	fs := pflag.NewFlagSet("exec-cache", pflag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--serve", "--agent", a.socket, "--cache-dir", a.cache, "--default-ttl", "1h"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, fs.Args(), Process{
			Environ: []string{"KUBECONFIG=" + a.kubeconfig, "HOME=" + dir, "PATH=/usr/bin:/bin"},
			Stdout:  io.Discard, Stderr: a.log, Log: slogTo(a.log),
		})
	}()
	var once sync.Once
	a.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("the agent: %v", err)
			}
		})
	}
	t.Cleanup(a.stop)
	for range 200 {
		if conn, err := net.Dial("unix", a.socket); err == nil {
			_ = conn.Close()
			return a
		}
		select {
		case err := <-done:
			t.Fatalf("the agent stopped: %v\n%s", err, a.log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("the agent does not listen on %s\n%s", a.socket, a.log)
	return nil
}

// ask calls the agent as a remote's kplug-exec-cache would, for client.
func (a *agentSetup) ask(client Client, info string, line ...string) (string, error) {
	a.t.Helper()
	var out bytes.Buffer
	err := askAgent(a.t.Context(), a.socket, line, []string{info}, client, &out)
	return out.String(), err
}

// refreshAtOnce lets a remote's refresh run the plugin however fresh its answer, for t.
func refreshAtOnce(t *testing.T) {
	was := agentRefreshAfter
	agentRefreshAfter = 0
	t.Cleanup(func() { agentRefreshAfter = was })
}

func TestAgentAnswersFromItsCache(t *testing.T) {
	refreshAtOnce(t)
	a := startAgent(t, fakePlugin(t))
	info := execInfoEnv(t, wire.V1, &wire.Cluster{Server: "https://remote.example"}, nil)
	for i := range 5 {
		out, err := a.ask(Client{PID: 1000 + i, Start: "7"}, info, pluginLine...)
		if err != nil {
			t.Fatalf("call %d: %v\n%s", i, err, a.log)
		}
		// The plugin was told no cluster: its exec block has no provideClusterInfo, and the
		// remote's cluster is the remote's word.
		if want := answer(wire.V1, "none", 1, ""); out != want {
			t.Fatalf("call %d: %q, want %q", i, out, want)
		}
	}
	if n := a.plugin.Runs(); n != 1 {
		t.Fatalf("5 remote calls ran the plugin %d times, want 1", n)
	}
	// A second call from a client that was served is a refresh after a 401.
	out, err := a.ask(Client{PID: 1000, Start: "7"}, info, pluginLine...)
	if err != nil || out != answer(wire.V1, "none", 2, "") {
		t.Fatalf("refresh: %q, %v", out, err)
	}
	// Each answer is logged with who asked; no token is.
	log := a.log.String()
	if strings.Count(log, "exec-cache agent: answered") != 6 || !strings.Contains(log, fmt.Sprintf("peerPID=%d", os.Getpid())) ||
		!strings.Contains(log, "remoteClientPID=1000") || strings.Contains(log, "tok-") {
		t.Errorf("the agent's log:\n%s", log)
	}
	// The plugin ran without a terminal, with its exec block's env.
	for _, c := range a.plugin.Calls() {
		if c.TTY {
			t.Errorf("the plugin ran with a terminal")
		}
	}
}

// TestAgentSeesARefreshThroughANewConnection: through a bind mount, each call of a remote
// client comes from a kplug-exec-cache process of its own; the client's second call is
// still a refresh after a 401, and runs the plugin again.
func TestAgentSeesARefreshThroughANewConnection(t *testing.T) {
	refreshAtOnce(t)
	a := startAgent(t, fakePlugin(t))
	info := execInfoEnv(t, wire.V1, nil, nil)
	for i := 1; i <= 2; i++ {
		// The program's client is its parent: this test, both times.
		program := exec.CommandContext(t.Context(), os.Args[0], "--agent", a.socket, "--", pluginLine[0], pluginLine[1])
		program.Env = append(os.Environ(), programEnv+"=1", info)
		out, err := program.Output()
		if err != nil || !strings.Contains(string(out), fmt.Sprintf(`"token":"tok-none-%d-`, i)) {
			t.Fatalf("call %d: %q, %v\n%s", i, out, err, a.log)
		}
	}
}

// TestAgentBoundsRemoteRefreshes: a remote that asks again and again as the client it was
// served to, or says in spec.response that the credential was rejected, runs the plugin
// again at most once per agentRefreshAfter.
func TestAgentBoundsRemoteRefreshes(t *testing.T) {
	a := startAgent(t, fakePlugin(t))
	v1 := execInfoEnv(t, wire.V1, nil, nil)
	rejected := execInfoEnv(t, wire.V1alpha1, nil, &wire.Response{Code: 401})
	for i := range 20 {
		info := v1
		if i%2 == 1 {
			info = rejected
		}
		if _, err := a.ask(Client{PID: 7, Start: "7"}, info, pluginLine...); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// The first v1 call and the first v1alpha1 call are misses of entries of their own.
	if n := a.plugin.Runs(); n != 2 {
		t.Fatalf("20 refreshes within %v ran the plugin %d times, want 2", agentRefreshAfter, n)
	}
}

func TestAgentRefuses(t *testing.T) {
	a := startAgent(t, fakePlugin(t))
	v1 := execInfoEnv(t, wire.V1, nil, nil)
	for _, tc := range []struct {
		name string
		info string
		line []string
		want string
	}{
		{"a command line it does not name", v1, []string{"/bin/sh", "-c", "id"}, `names no exec plugin "/bin/sh -c id"`},
		{"the named plugin with other arguments", v1, append(pluginLine, "--extra"), "names no exec plugin"},
		{"a prefix of the named line", v1, pluginLine[:1], "names no exec plugin"},
		{"the wrapper itself", v1, []string{"/usr/local/bin/kplug-exec-cache", "--cache-dir", "/elsewhere", "--", pluginLine[0], pluginLine[1]}, "names no exec plugin"},
		{"a cluster the plugin is not named for", execInfoEnv(t, wire.V1, &wire.Cluster{Server: "https://evil.example"}, nil),
			append(pluginLine[:1:1], pluginLine[1], "cluster"), "for https://one.example:6443, https://two.example:6443, not for https://evil.example"},
		{"no cluster for a plugin named for two", v1, append(pluginLine[:1:1], pluginLine[1], "cluster"), "not for no cluster"},
		{"a client that signs", execInfoEnv(t, wire.V1, nil, nil)[:len(wire.InfoEnv)+1] + `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false,"httpSignature":{"algorithm":"ecdsa-p256-sha256"}}}`,
			pluginLine, "never sends signing material"},
		{"not an ExecCredential", wire.InfoEnv + `={"kind":"Pod"}`, pluginLine, "refused"},
		{"a relative command after --", v1, []string{"bin/token"}, "names bin/token by a relative path, which the agent does not run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := a.ask(Client{PID: 1, Start: "1"}, tc.info, tc.line...)
			var agentErr *AgentError
			if !errors.As(err, &agentErr) || !strings.Contains(err.Error(), tc.want) || out != "" {
				t.Fatalf("%q, %v; want an agent error with %q", out, err, tc.want)
			}
		})
	}
	if n := a.plugin.Runs(); n != 0 {
		t.Fatalf("refused calls ran the plugin %d times", n)
	}
}

func TestAgentTellsThePluginTheWorkstationsCluster(t *testing.T) {
	a := startAgent(t, fakePlugin(t))
	// The remote names cluster two by its server, with its own CA and extension: the plugin
	// is told the workstation's cluster two.
	info := execInfoEnv(t, wire.V1beta1, &wire.Cluster{Server: "https://two.example:6443", CertificateAuthorityData: []byte("remote CA"), Config: []byte(`{"audience":"evil"}`)}, nil)
	out, err := a.ask(Client{PID: 5, Start: "5"}, info, pluginLine[0], pluginLine[1], "cluster")
	if err != nil || out != answer(wire.V1beta1, "https://two.example:6443", 1, "") {
		t.Fatalf("%q, %v", out, err)
	}
	info = execInfoEnv(t, wire.V1beta1, &wire.Cluster{Server: "https://one.example:6443"}, nil)
	if _, err := a.ask(Client{PID: 5, Start: "5"}, info, pluginLine[0], pluginLine[1], "cluster"); err != nil {
		t.Fatal(err)
	}
	calls := a.plugin.Calls()
	if len(calls) != 2 {
		t.Fatalf("%d runs", len(calls))
	}
	cluster := func(i int) *wire.Cluster {
		info, err := wire.LoadInfo(calls[i].Info)
		if err != nil || info.Cluster == nil {
			t.Fatalf("run %d: %v, %+v", i, err, info)
		}
		return info.Cluster
	}
	if c := cluster(0); c.CertificateAuthorityData != nil || string(c.Config) != "null" {
		t.Errorf("cluster two as the plugin saw it: %+v", c)
	}
	if c := cluster(1); string(c.CertificateAuthorityData) != "CA\n" || string(c.Config) != `{"audience":"one"}` {
		t.Errorf("cluster one as the plugin saw it: %+v (config %s)", c, c.Config)
	}
}

// TestAgentRunsARelativeCommandFromTheKubeconfigsDirectory: kubectl runs an exec block's
// command bin/plugin from the directory of the kubeconfig that names it; so does the agent,
// not a bin/plugin in the directory it was started in (a repository's, say).
func TestAgentRunsARelativeCommandFromTheKubeconfigsDirectory(t *testing.T) {
	plugin := fakePlugin(t)
	a := startAgent(t, plugin)
	bin := filepath.Join(a.dir, "bin")
	if err := os.Mkdir(bin, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(os.Args[0], filepath.Join(bin, "plugin")); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "planted-ran")
	if err := os.WriteFile(filepath.Join(planted, "plugin"), []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(planted))
	env := ""
	for _, kv := range plugin.Env() {
		name, value, _ := strings.Cut(kv, "=")
		env += fmt.Sprintf("\n      - name: %s\n        value: %q", name, value)
	}
	f, err := os.OpenFile(a.kubeconfig, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(f, `- name: relative
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: bin/plugin
      args: [%q]
      env:%s
`, pluginLine[1], env)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.ask(Client{PID: 3, Start: "3"}, execInfoEnv(t, wire.V1, nil, nil), "bin/plugin", pluginLine[1])
	if err != nil || out != answer(wire.V1, "none", 1, "") {
		t.Fatalf("%q, %v\n%s", out, err, a.log)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the agent ran the bin/plugin of its working directory")
	}
}

func TestAgentSendsNoSigningMaterial(t *testing.T) {
	a := startAgent(t, exectest.New(t).Stdout(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"httpSignature":{"keyID":"k","secretBase64":"c2VjcmV0"}}}`))
	_, err := a.ask(Client{}, execInfoEnv(t, wire.V1, nil, nil), pluginLine...)
	if err == nil || !strings.Contains(err.Error(), "not sent to a remote") || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Fatalf("%v", err)
	}
	if strings.Contains(a.log.String(), "c2VjcmV0") {
		t.Errorf("the key is in the log:\n%s", a.log)
	}
}

// TestAgentPassesOnThePluginsFailure: the remote gets the exit code and where to look, not
// what the plugin wrote: its stdout is dropped and its stderr (here a refresh token, as a
// failing login may print) stays on the workstation.
func TestAgentPassesOnThePluginsFailure(t *testing.T) {
	a := startAgent(t, exectest.New(t).Stdout("secret stdout").Stderr("login failed: refresh_token=s3cr3t\n").Exit(7))
	out, err := a.ask(Client{}, execInfoEnv(t, wire.V1, nil, nil), pluginLine...)
	var agentErr *AgentError
	if !errors.As(err, &agentErr) || agentErr.Code != 7 || out != "" || strings.Contains(err.Error(), "secret stdout") {
		t.Fatalf("%q, %v", out, err)
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("the plugin's stderr was sent to the remote: %v", err)
	}
	if !strings.Contains(a.log.String(), "login failed") {
		t.Errorf("the plugin's stderr is not in the agent's output:\n%s", a.log)
	}
}

func TestAgentGone(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock")
	var out bytes.Buffer
	err := askAgent(t.Context(), socket, pluginLine, []string{execInfoEnv(t, wire.V1, nil, nil)}, Client{}, &out)
	var gone *AgentGoneError
	if !errors.As(err, &gone) || !strings.Contains(err.Error(), "no agent answers at "+socket+" (no such file or directory)") ||
		!strings.Contains(err.Error(), "ssh -R "+socket+":") {
		t.Fatalf("%v", err)
	}
	// A socket nothing listens on any more: refused.
	a := startAgent(t, fakePlugin(t))
	if err := os.Link(a.socket, socket); err != nil {
		t.Fatal(err)
	}
	a.stop()
	err = askAgent(t.Context(), socket, pluginLine, []string{execInfoEnv(t, wire.V1, nil, nil)}, Client{}, &out)
	if !errors.As(err, &gone) || !strings.Contains(err.Error(), "(connection refused)") {
		t.Fatalf("%v", err)
	}
	if _, err := os.Lstat(a.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stopped agent left its socket: %v", err)
	}
}

// TestAgentRemovesOnlyItsOwnSocket: an agent that stops after something else took its
// socket's place (another agent's socket, live or not yet listening) leaves it alone.
func TestAgentRemovesOnlyItsOwnSocket(t *testing.T) {
	a := startAgent(t, fakePlugin(t))
	if err := os.Rename(a.socket, a.socket+".old"); err != nil {
		t.Fatal(err)
	}
	// A socket bound but not listening refuses connections, as a stale one does.
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: a.socket}); err != nil {
		t.Fatal(err)
	}
	a.stop()
	if _, err := os.Lstat(a.socket); err != nil {
		t.Fatalf("the stopping agent removed a socket it did not create: %v", err)
	}
}

// TestAgentRemoteGivesUpOnASilentAgent: an agent that takes the request and never answers
// gets one error after agentAnswerTimeout, not a client hung for ever.
func TestAgentRemoteGivesUpOnASilentAgent(t *testing.T) {
	was := agentAnswerTimeout
	agentAnswerTimeout = 200 * time.Millisecond
	t.Cleanup(func() { agentAnswerTimeout = was })
	socket := filepath.Join(t.TempDir(), "silent.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if conn, err := ln.Accept(); err == nil {
			accepted <- conn
		}
	}()
	var out bytes.Buffer
	err = askAgent(t.Context(), socket, pluginLine, []string{execInfoEnv(t, wire.V1, nil, nil)}, Client{}, &out)
	if err == nil || !strings.Contains(err.Error(), "the agent at "+socket+" did not answer within 200ms") {
		t.Fatalf("%v", err)
	}
	(<-accepted).Close()
}

func TestAgentServeRefusesUnsafePlaces(t *testing.T) {
	a := startAgent(t, fakePlugin(t))
	serve := func(socket string) error {
		c := &Command{}
		fs := pflag.NewFlagSet("exec-cache", pflag.ContinueOnError)
		c.AddFlags(fs)
		if err := fs.Parse([]string{"--serve", "--agent", socket, "--cache-dir", a.cache}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return c.Run(ctx, nil, Process{Environ: []string{"KUBECONFIG=" + a.kubeconfig}, Stdout: io.Discard, Stderr: io.Discard})
	}
	if err := serve(a.socket); err == nil || !strings.Contains(err.Error(), "an agent already listens on") {
		t.Errorf("a second agent on a live socket: %v", err)
	}
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := serve(filepath.Join(shared, "agent.sock")); err == nil || !strings.Contains(err.Error(), "the socket's directory") {
		t.Errorf("a socket in a directory others write to: %v", err)
	}
	// A private directory under one others may write to: they could move it aside and put
	// their own socket in its place.
	under := filepath.Join(shared, "private")
	if err := os.Mkdir(under, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := serve(filepath.Join(under, "agent", "agent.sock")); err == nil || !strings.Contains(err.Error(), shared+" is writable by other users") {
		t.Errorf("a socket under a directory others write to: %v", err)
	}
	// The same, named from inside: the directories above the working directory count too.
	t.Chdir(under)
	if err := serve(filepath.Join("agent", "agent.sock")); err == nil || !strings.Contains(err.Error(), shared+" is writable by other users") {
		t.Errorf("a relative socket path under a directory others write to: %v", err)
	}
	file := filepath.Join(a.dir, "agent", "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := serve(file); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("a file in the socket's place: %v", err)
	}
}

// TestAgentRefusesAnotherUser: the check that counts is the peer's uid, not the socket's
// mode: the socket is opened to everyone here, as a careless forward might.
func TestAgentRefusesAnotherUser(t *testing.T) {
	other := localuser.New(t)
	a := startAgent(t, fakePlugin(t))
	for _, p := range []string{filepath.Dir(a.dir), a.dir, filepath.Dir(a.socket)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(a.socket, 0o777); err != nil {
		t.Fatal(err)
	}
	program := other.Executable(t, os.Args[0])
	cmd := other.Command(t.Context(), program, "--agent", a.socket, "--", pluginLine[0], pluginLine[1])
	cmd.Env = append(cmd.Env, programEnv+"=1", execInfoEnv(t, wire.V1, nil, nil))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || !strings.Contains(stderr.String(), "refused: this agent answers its own user") || stdout.Len() != 0 {
		t.Fatalf("%v\nstdout: %s\nstderr: %s", err, &stdout, &stderr)
	}
	if n := a.plugin.Runs(); n != 0 {
		t.Fatalf("another user's call ran the plugin %d times", n)
	}
	if !strings.Contains(a.log.String(), fmt.Sprintf(`refused a connection from another user" peerPID=%d peerUID=%d`, cmd.Process.Pid, other.UID)) {
		t.Errorf("the agent's log:\n%s", a.log)
	}
}

// TestAgentOutlastsAHostileRemote: garbage, a huge frame, a stalled request, an answer
// never read and many idle connections hurt neither the agent nor its other clients.
func TestAgentOutlastsAHostileRemote(t *testing.T) {
	a := startAgent(t, fakePlugin(t))
	info := execInfoEnv(t, wire.V1, nil, nil)
	dial := func() net.Conn {
		conn, err := net.Dial("unix", a.socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	readAnswer := func(conn net.Conn) string {
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		b, err := readFrame(conn, maxAgentAnswer)
		if err != nil {
			return "error: " + err.Error()
		}
		return string(b)
	}
	// Garbage that is a small frame, and a frame announcing 4 GiB.
	garbage := dial()
	_, _ = garbage.Write([]byte("\x00\x00\x00\x05hello"))
	if got := readAnswer(garbage); !strings.Contains(got, "not a request of this agent") {
		t.Errorf("garbage: %s", got)
	}
	huge := dial()
	_, _ = huge.Write([]byte{0xff, 0xff, 0xff, 0xff})
	if got := readAnswer(huge); !strings.Contains(got, "frame too large") {
		t.Errorf("a huge frame: %s", got)
	}
	// Half a request, then nothing; a request whose answer is never read.
	stalled := dial()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], 100)
	_, _ = stalled.Write(append(n[:], `{"v":1,`...))
	deaf := dial()
	body := fmt.Sprintf(`{"v":1,"command":%q,"args":[%q],"info":%q}`, pluginLine[0], pluginLine[1], strings.TrimPrefix(info, wire.InfoEnv+"="))
	binary.BigEndian.PutUint32(n[:], uint32(len(body)))
	_, _ = deaf.Write(append(n[:], body...))
	// Idle connections, more than wait at once: the longest waiting are closed to make
	// room, so a client that sends its request is served, from this process or another.
	for range agentMaxWaiting + 16 {
		dial()
	}
	if out, err := a.ask(Client{PID: 9, Start: "9"}, info, pluginLine...); err != nil || out != answer(wire.V1, "none", 1, "") {
		t.Fatalf("a call during the flood: %q, %v", out, err)
	}
	program := exec.CommandContext(t.Context(), os.Args[0], "--agent", a.socket, "--", pluginLine[0], pluginLine[1])
	program.Env = append(os.Environ(), programEnv+"=1", info)
	out, err := program.Output()
	if err != nil || !strings.Contains(string(out), `"token":"tok-none-`) {
		t.Fatalf("another process during the flood: %q, %v\n%s", out, err, a.log)
	}
	if got := readAnswer(stalled); !strings.Contains(got, "EOF") {
		t.Errorf("the stalled connection: %s", got)
	}
	if got := readAnswer(deaf); !strings.Contains(got, `"stdout":"eyAi`) {
		t.Errorf("the connection that did not read: %s", got)
	}
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// BenchmarkAgentHit is a remote's call answered from the agent's cache: the remote side's
// dial and frames, the agent's peer check, kubeconfig read and match, kuberc load and the
// cache hit, with each call another client as kubectl processes are. Against
// BenchmarkRunHit, the same hit on the workstation, it is what the agent adds.
func BenchmarkAgentHit(b *testing.B) {
	a := startAgent(b, fakePlugin(b))
	info := execInfoEnv(b, wire.V1, nil, nil)
	pid := 1000
	for b.Loop() {
		pid++
		if out, err := a.ask(Client{PID: pid % 100000, Start: "1"}, info, pluginLine...); err != nil || out == "" {
			b.Fatalf("%v: %q", err, out)
		}
	}
	if runs := a.plugin.Runs(); runs != 1 {
		b.Fatalf("the plugin ran %d times, want 1", runs)
	}
}

// TestAgentClosesTheLongestWaiting: past agentMaxWaiting connections waiting for their
// request, each new one closes the one that has waited longest, so their number stays
// bounded whoever holds them.
func TestAgentClosesTheLongestWaiting(t *testing.T) {
	a := &agent{waiting: connlist.New()}
	var clients []net.Conn
	for range agentMaxWaiting + 2 {
		server, client := net.Pipe()
		t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
		clients = append(clients, client)
		a.wait(server)
	}
	if n := a.waiting.Len(); n != agentMaxWaiting {
		t.Fatalf("%d connections wait, want %d", n, agentMaxWaiting)
	}
	for i, c := range clients {
		_ = c.SetWriteDeadline(time.Now().Add(time.Millisecond))
		_, err := c.Write([]byte{0})
		closed := errors.Is(err, io.ErrClosedPipe)
		if closed != (i < 2) {
			t.Errorf("connection %d: write %v", i, err)
		}
	}
}

// TestAgentRemoteWaitsForRoomInTheQueue: while the agent's queue of connections is full (a
// remote flooding it), the remote side waits for room rather than failing at once with
// EAGAIN, which a flood's blocking connects would otherwise make the rule.
func TestAgentRemoteWaitsForRoomInTheQueue(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "full.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: socket}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), socket)
	ln, err := net.FileListener(f)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Fill the queue as a flood does: connections nobody accepts yet.
	var fillers []net.Conn
	for {
		conn, err := net.Dial("unix", socket)
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, conn)
	}
	defer func() {
		for _, c := range fillers {
			_ = c.Close()
		}
	}()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		var out bytes.Buffer
		err := askAgent(t.Context(), socket, pluginLine, []string{execInfoEnv(t, wire.V1, nil, nil)}, Client{}, &out)
		done <- result{out.String(), err}
	}()
	// The client tries while the queue is full; then the agent takes the flood's
	// connections (closing them) and answers the next.
	time.Sleep(100 * time.Millisecond)
	for range fillers {
		conn, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.Close()
	}
	// A client that gave up is not coming: the test fails on its error below.
	_ = ln.(*net.UnixListener).SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := ln.Accept()
	if err != nil {
		r := <-done
		t.Fatalf("no client came after the queue emptied (%v): it got %q, %v", err, r.out, r.err)
	}
	defer conn.Close()
	if _, err := readFrame(conn, maxAgentRequest); err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(conn, []byte(`{"stdout":"YW5zd2Vy"}`)); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.out != "answer" {
		t.Fatalf("got %q, %v; want the answer", r.out, r.err)
	}
}

// TestAgentRefusesALineTwoBlocksRunDifferently: the remote sends a command line, not the
// env its block sets, so a line two exec blocks name with different env (AWS_PROFILE=dev
// and =prod) is refused rather than run as whichever block sorts first; blocks that run it
// alike are served.
func TestAgentRefusesALineTwoBlocksRunDifferently(t *testing.T) {
	plugin := fakePlugin(t)
	a := startAgent(t, plugin)
	env := ""
	for _, kv := range plugin.Env() {
		name, value, _ := strings.Cut(kv, "=")
		env += fmt.Sprintf("\n      - name: %s\n        value: %q", name, value)
	}
	block := func(user, extra string) string {
		return fmt.Sprintf(`- name: %s
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: %q
      args: [%q]
      env:%s%s
`, user, pluginLine[0], pluginLine[1], env, extra)
	}
	appendTo := func(text string) {
		f, err := os.OpenFile(a.kubeconfig, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteString(text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	appendTo(block("alike", ""))
	if out, err := a.ask(Client{PID: 3, Start: "3"}, execInfoEnv(t, wire.V1, nil, nil), pluginLine...); err != nil || out != answer(wire.V1, "none", 1, "") {
		t.Fatalf("two blocks that run the line alike: %q, %v\n%s", out, err, a.log)
	}
	appendTo(block("a-dev", "\n      - {name: PROFILE, value: dev}"))
	_, err := a.ask(Client{PID: 4, Start: "4"}, execInfoEnv(t, wire.V1, nil, nil), pluginLine...)
	if err == nil || !strings.Contains(err.Error(), "in several exec blocks (users a-dev, alike, fake) that run it differently") {
		t.Fatalf("%v\n%s", err, a.log)
	}
	if runs := plugin.Runs(); runs != 1 {
		t.Errorf("the plugin ran %d times, want 1", runs)
	}
}

// TestAgentBoundsRequestsPerLine: requests waiting for one command line's run fill that
// line's share, not the agent's: another line is still answered (review B3).
func TestAgentBoundsRequestsPerLine(t *testing.T) {
	a := &agent{}
	for i := range agentMaxPerLine {
		if !a.acquire("slow login") {
			t.Fatalf("request %d for one line turned away", i)
		}
	}
	if a.acquire("slow login") {
		t.Fatal("a request past the line's share was let in")
	}
	if !a.acquire("another plugin") {
		t.Fatal("another line was turned away")
	}
	a.release("slow login")
	if !a.acquire("slow login") {
		t.Fatal("a released share was not given back")
	}
	// The agent's own bound still holds across lines.
	for i := 0; a.acquire(fmt.Sprint("line ", i)); i++ {
		if i > agentMaxServing {
			t.Fatalf("more than %d requests let in", agentMaxServing)
		}
	}
	if a.serving != agentMaxServing {
		t.Fatalf("%d requests let in, want %d", a.serving, agentMaxServing)
	}
}

// TestAgentRemoteAsksAgainAfterAnUnansweredClose: a connection the agent closes without a
// byte of an answer (under a flood, the longest waiting) is asked once more (review B7);
// a second such close is reported.
func TestAgentRemoteAsksAgainAfterAnUnansweredClose(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serve := func(closeFirst int) <-chan int {
		served := make(chan int, 1)
		go func() {
			n := 0
			defer func() { served <- n }()
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				n++
				if _, err := readFrame(conn, maxAgentRequest); err == nil && n > closeFirst {
					_ = writeFrame(conn, []byte(`{"stdout":"YW5zd2Vy"}`)) // "answer"
				}
				_ = conn.Close()
				if n > closeFirst || n == 2 {
					return
				}
			}
		}()
		return served
	}
	info := []string{execInfoEnv(t, wire.V1, nil, nil)}
	served := serve(1)
	var out bytes.Buffer
	if err := askAgent(t.Context(), socket, pluginLine, info, Client{}, &out); err != nil || out.String() != "answer" {
		t.Fatalf("%q, %v", out.String(), err)
	}
	if n := <-served; n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
	served = serve(2)
	var gone *AgentGoneError
	if err := askAgent(t.Context(), socket, pluginLine, info, Client{}, &out); !errors.As(err, &gone) || !strings.Contains(err.Error(), "without an answer") {
		t.Fatalf("%v", err)
	}
	<-served
}

// TestAgentAppliesTheBlocksKuberc: an exec-cache block's own --kuberc is one more policy
// the plugin must pass when a remote asks for it, as when the block runs here.
func TestAgentAppliesTheBlocksKuberc(t *testing.T) {
	a := startAgent(t, fakePlugin(t))
	deny := filepath.Join(a.dir, "deny-kuberc")
	if err := os.WriteFile(deny, []byte("apiVersion: kubectl.config.k8s.io/v1beta1\nkind: Preference\ncredentialPluginPolicy: DenyAll\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := ""
	for _, kv := range a.plugin.Env() {
		name, value, _ := strings.Cut(kv, "=")
		env += fmt.Sprintf("\n      - name: %s\n        value: %q", name, value)
	}
	f, err := os.OpenFile(a.kubeconfig, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct{ name, kuberc, arg string }{{"denied", deny, "denied"}, {"relative-kuberc", "deny-kuberc", "relative"}} {
		_, err = fmt.Fprintf(f, `- name: %s
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: kplug-exec-cache
      args: [--kuberc=%s, --, %q, %q, %s]
      env:%s
`, u.name, u.kuberc, pluginLine[0], pluginLine[1], u.arg, env)
		if err != nil {
			break
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	v1 := execInfoEnv(t, wire.V1, nil, nil)
	if _, err := a.ask(Client{}, v1, pluginLine[0], pluginLine[1], "denied"); err == nil || !strings.Contains(err.Error(), "the credential plugin policy in "+deny) {
		t.Errorf("a plugin the block's kuberc denies: %v", err)
	}
	if _, err := a.ask(Client{}, v1, pluginLine[0], pluginLine[1], "relative"); err == nil || !strings.Contains(err.Error(), "--kuberc deny-kuberc, a relative path") {
		t.Errorf("a relative --kuberc: %v", err)
	}
	if n := a.plugin.Runs(); n != 0 {
		t.Fatalf("the plugin ran %d times", n)
	}
}
