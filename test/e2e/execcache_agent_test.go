//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/testkit/localuser"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/sshd"
	"github.com/kplug/kplug/test/e2e/framework"
)

// The exec-cache agent (issue 34): `kplug exec-cache --serve` on the workstation answers,
// over a unix socket forwarded into a dev container or an SSH session, the exec-cache
// calls made there, with the workstation's logins. These tests run it with real kubectl
// on both sides, the socket carried by a bind mount in a mount namespace of its own and
// by OpenSSH's ssh -R.

// agentProc is a running `kplug exec-cache --serve`.
type agentProc struct {
	cmd     *exec.Cmd
	socket  string
	logPath string
	exited  chan struct{}
	err     error // of cmd.Wait, once exited is closed
}

// startAgent starts cmd, a `kplug exec-cache --serve --agent socket` command (as whichever
// user cmd says) made with a context that the test's end does not cancel, waits until it
// says it listens on socket, and stops it with SIGTERM when the test ends (which it must
// obey), printing its log if the test failed.
func startAgent(t *testing.T, cmd *exec.Cmd, socket string) *agentProc {
	t.Helper()
	a := &agentProc{cmd: cmd, socket: socket, logPath: filepath.Join(t.TempDir(), "agent.log"), exited: make(chan struct{})}
	logf, err := os.Create(a.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.err = cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-a.exited:
			if a.err != nil {
				t.Errorf("the agent ended with %v on SIGTERM", a.err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("the agent did not end on SIGTERM within 30s")
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-a.exited
		if t.Failed() {
			t.Logf("agent log:\n%s", a.log())
		}
	})
	poll.Until(t, "the agent to listen on "+socket, func() bool {
		select {
		case <-a.exited:
			t.Fatalf("the agent exited at start: %v\n%s", a.err, a.log())
		default:
		}
		return strings.Contains(a.log(), "listening on "+socket)
	})
	return a
}

func (a *agentProc) log() string {
	b, err := os.ReadFile(a.logPath)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// running fails t if the agent has exited.
func (a *agentProc) running(t *testing.T) {
	t.Helper()
	select {
	case <-a.exited:
		t.Fatalf("the agent exited: %v\n%s", a.err, a.log())
	default:
	}
}

// logLines returns the lines of the agent's log that contain all of parts.
func (a *agentProc) logLines(parts ...string) []string {
	var lines []string
	for line := range strings.Lines(a.log()) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			lines = append(lines, line)
		}
	}
	return lines
}

// agentKubeconfig writes the kubeconfig of a remote whose users ask the agent for the
// command lines given (each after `kplug-exec-cache [agentArgs...] --`, or kplug
// exec-cache when lean is "kplug"), without any env: the plugin's environment is the
// workstation's.
func agentKubeconfig(t *testing.T, cp *framework.ControlPlane, path, wrapper string, lines map[string][]string, agentArgs ...string) {
	t.Helper()
	users := map[string]*clientcmdapi.ExecConfig{}
	for name, line := range lines {
		var args []string
		if filepath.Base(wrapper) == "kplug" {
			args = append(args, "exec-cache")
		}
		args = append(append(append(args, agentArgs...), "--"), line...)
		users[name] = &clientcmdapi.ExecConfig{
			APIVersion: execcred.V1, Command: wrapper, Args: args,
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cp.WriteExecKubeconfig(path, users); err != nil {
		t.Fatal(err)
	}
}

// chownTree gives root's files under dir to u.
func chownTree(t *testing.T, u *localuser.User, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, u.UID, u.GID)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// filesContaining lists the files under dir whose content holds secret.
func filesContaining(t *testing.T, dir, secret string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(secret)) {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// inNamespace runs argv as u in a mount namespace of its own ("the container"), where from
// (a directory, or the socket alone) is bind-mounted read-only on to, as the docs'
// devcontainer.json mounts it, with exactly env as its environment.
func inNamespace(t *testing.T, u *localuser.User, from, to string, env []string, argv ...string) (stdout, stderr string, err error) {
	t.Helper()
	script := `uid=$0 gid=$3; mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && shift 4 && exec setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"`
	args := append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, strconv.Itoa(u.UID), from, to, strconv.Itoa(u.GID), "--"}, argv...)
	return runEnv(t, env, "unshare", args...)
}

// TestExecCacheAgentContainer: a workstation user runs the agent; in a separate mount
// namespace standing for a dev container, into which the agent's directory is
// bind-mounted, that user's kubectl authenticates with the credential the workstation's
// own kubectl cached: five commands there, no run of the plugin. Another local user who
// can reach the socket is refused by the agent's peer check (the file mode is opened up
// for the test), a command line the workstation's kubeconfig does not name is refused
// and not run, and nothing the container's side wrote holds the token.
func TestExecCacheAgentContainer(t *testing.T) {
	workstation := localuser.New(t)
	attacker := localuser.New(t)
	cp := framework.StartForTest(t, framework.Options{})
	kubectl := filepath.Join(cp.BinDir, "kubectl")
	token := cp.TokenUser.Token
	const user = "bob" // cp.TokenUser

	// The workstation: binaries, plugin files, kubeconfig and cache in the user's home.
	build := t.TempDir()
	home := workstation.Home
	kplug := workstation.Executable(t, buildBinary(t, build, "./cmd/kplug", "kplug"))
	lean := workstation.Executable(t, buildBinary(t, build, "./cmd/kplug-exec-cache", "kplug-exec-cache"))
	plugin := workstation.Executable(t, buildBinary(t, build, "./test/e2e/testplugin", "testplugin"))
	tokenFile, counts := filepath.Join(home, "token"), filepath.Join(home, "count")
	writeBytes(t, tokenFile, []byte(token))
	kubeconfig, cacheDir := filepath.Join(home, ".kube", "config"), filepath.Join(home, ".cache", "kplug", "exec-cache")
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := cp.WriteExecKubeconfig(kubeconfig, map[string]*clientcmdapi.ExecConfig{
		"lean": {
			APIVersion: execcred.V1, Command: lean, Args: []string{"--cache-dir", cacheDir, "--", plugin},
			Env:             []clientcmdapi.ExecEnvVar{{Name: "TEST_TOKEN_FILE", Value: tokenFile}, {Name: "TEST_COUNT_FILE", Value: counts}},
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		},
	}); err != nil {
		t.Fatal(err)
	}
	chownTree(t, workstation, home)
	runs := func() int {
		b, _ := os.ReadFile(counts)
		return len(b)
	}

	socket := filepath.Join(home, "agent", "exec-cache.sock")
	serve := workstation.Command(context.WithoutCancel(t.Context()), kplug, "exec-cache", "--serve", "--agent", socket, "--cache-dir", cacheDir)
	serve.Env = append(serve.Env, "KUBECONFIG="+kubeconfig)
	agent := startAgent(t, serve, socket)
	if info, err := os.Stat(filepath.Dir(socket)); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("the agent's directory: %v, %v; want a directory of mode 0700", info, err)
	}

	// The workstation logs in once, with its own kubectl, in the environment the agent
	// has: for a plugin it does not know, exec-cache keys its entries by the environment.
	whoami := []string{"auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"}
	out := workstation.Sh(t, "KUBECONFIG="+sshd.Quote(kubeconfig)+" exec "+sshd.Quote(append([]string{kubectl}, whoami...)...))
	if out != user || runs() != 1 {
		t.Fatalf("the workstation's kubectl: %q after %d plugin runs, want %q after 1", out, runs(), user)
	}

	// The container: its own home and kubeconfig, and the agent's directory mounted at run
	// (a fresh directory, empty outside the namespace), as a dev container's bind mount.
	run, err := os.MkdirTemp("", "kplug-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(run) })
	if err := os.Chmod(run, 0o755); err != nil {
		t.Fatal(err)
	}
	ctrHome, err := os.MkdirTemp("", "kplug-ctr-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(ctrHome) })
	marker := filepath.Join(ctrHome, "ran")
	ctrKubeconfig := filepath.Join(ctrHome, ".kube", "config")
	remoteSocket := filepath.Join(run, "exec-cache.sock")
	agentKubeconfig(t, cp, ctrKubeconfig, lean, map[string][]string{
		"env":     {plugin},
		"unnamed": {"/bin/sh", "-c", "echo ran > " + marker},
		"other":   {plugin, "--extra"},
	})
	agentKubeconfig(t, cp, filepath.Join(ctrHome, ".kube", "flag"), lean, map[string][]string{"flag": {plugin}}, "--agent", remoteSocket)
	if err := os.MkdirAll(filepath.Join(ctrHome, "tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	chownTree(t, workstation, ctrHome)
	ctrEnv := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + ctrHome, "XDG_CACHE_HOME=" + filepath.Join(ctrHome, ".cache"),
		"TMPDIR=" + filepath.Join(ctrHome, "tmp"), "KUBECONFIG=" + ctrKubeconfig, "KPLUG_EXEC_CACHE_AGENT=" + remoteSocket,
	}
	container := func(args ...string) (string, string, error) {
		t.Helper()
		return inNamespace(t, workstation, filepath.Dir(socket), run, ctrEnv, append([]string{kubectl}, args...)...)
	}

	const n = 5
	for i := range n {
		out, errOut, err := container(append([]string{"--context", "env"}, whoami...)...)
		if err != nil || out != user {
			t.Fatalf("kubectl %d in the container: %q, %v\n%s", i, out, err, errOut)
		}
	}
	out, errOut, err := container(append([]string{"--kubeconfig", filepath.Join(ctrHome, ".kube", "flag")}, whoami...)...)
	if err != nil || out != user {
		t.Errorf("kubectl in the container, with --agent in its exec block: %q, %v\n%s", out, err, errOut)
	}
	if got := runs(); got != 1 {
		t.Errorf("the plugin ran %d times for the workstation's login and %d commands in the container, want once", got, n+1)
	}
	if lines := agent.logLines("answered"); len(lines) < n+1 {
		t.Errorf("the agent logged %d answers, want %d:\n%s", len(lines), n+1, agent.log())
	}

	// Without the bind mount, the same socket path has no agent behind it: the mount
	// carried it, and the remote side says how to forward one.
	_, errOut, err = runEnv(t, ctrEnv, "setpriv", append([]string{"--reuid=" + strconv.Itoa(workstation.UID), "--regid=" + strconv.Itoa(workstation.GID), "--clear-groups", "--", kubectl, "--context", "env"}, whoami...)...)
	if err == nil || !strings.Contains(errOut, "no agent answers at "+remoteSocket) {
		t.Errorf("kubectl outside the container: %v, want an error naming %s:\n%s", err, remoteSocket, errOut)
	}

	// A command line the workstation's kubeconfig does not name is refused, and not run.
	for _, context := range []string{"unnamed", "other"} {
		out, errOut, err := container(append([]string{"--context", context}, whoami...)...)
		if err == nil || !strings.Contains(errOut, "names no exec plugin") || strings.Contains(out+errOut, token) {
			t.Errorf("kubectl in the container, context %s: %q, %v; want a refusal saying the kubeconfig names no exec plugin:\n%s", context, out, err, errOut)
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the agent ran the container's command line: %s: %v", marker, err)
	}

	// Another user who can reach the socket (its mode opened for the test, and the socket
	// bind-mounted into a directory that user may enter) is refused by the agent itself.
	// The remote side refuses first an agent of another uid, so the attacker speaks the
	// agent's protocol directly, through this test binary.
	if err := os.Chmod(socket, 0o666); err != nil {
		t.Fatal(err)
	}
	reach, err := os.MkdirTemp("", "kplug-reach-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(reach) })
	if err := os.Chmod(reach, 0o755); err != nil {
		t.Fatal(err)
	}
	asker := attacker.Executable(t, testBinary(t))
	bSocket := filepath.Join(reach, "exec-cache.sock")
	writeBytes(t, bSocket, nil)
	attackerEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + attacker.Home, agentAskEnv + "=" + bSocket, agentAskCommandEnv + "=" + plugin}
	out, errOut, err = inNamespace(t, attacker, socket, bSocket, attackerEnv, asker)
	if err != nil || !strings.Contains(out, "refused") || strings.Contains(out, token) {
		t.Errorf("%v asking the agent: %q, %v; want an answer that refuses it:\n%s", attacker, out, err, errOut)
	}
	if lines := agent.logLines("refused", "peerUID="+strconv.Itoa(attacker.UID)); len(lines) == 0 {
		t.Errorf("the agent logged no refusal of uid %d:\n%s", attacker.UID, agent.log())
	}
	// Through the real remote side, the attacker's kubectl stops before asking: the
	// process listening is another user's.
	attackerKubeconfig := filepath.Join(reach, "kubeconfig")
	agentKubeconfig(t, cp, attackerKubeconfig, lean, map[string][]string{"agent": {plugin}}, "--agent", bSocket)
	if err := os.Chmod(attackerKubeconfig, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = inNamespace(t, attacker, socket, bSocket, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + attacker.Home},
		kubectl, "--kubeconfig", attackerKubeconfig, "auth", "whoami")
	if err == nil || strings.Contains(out+errOut, token) || !strings.Contains(errOut, "uid "+strconv.Itoa(workstation.UID)) {
		t.Errorf("%v's kubectl through the agent: %q, %v; want a refusal naming uid %d:\n%s", attacker, out, err, workstation.UID, errOut)
	}
	if got := runs(); got != 1 {
		t.Errorf("the plugin ran %d times, want 1: refusals run nothing", got)
	}

	// The container still authenticates, and wrote no credential anywhere it writes.
	out, errOut, err = container(append([]string{"--context", "env"}, whoami...)...)
	if err != nil || out != user {
		t.Errorf("kubectl in the container after the refusals: %q, %v\n%s", out, err, errOut)
	}
	if found := filesContaining(t, ctrHome, token); len(found) > 0 {
		t.Errorf("the container's side wrote the token to disk: %v", found)
	}
	agent.running(t)
}

// testBinary is this test binary, which the attacker runs as the agent client of its own
// (agentAskEnv).
func testBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// agentAskEnv makes the test binary a client of the agent at the socket it names that
// speaks the agent's protocol itself, without the remote side's checks: it asks for the
// command line in agentAskCommandEnv and prints the agent's answer.
const (
	agentAskEnv        = "KPLUG_E2E_AGENT_ASK"
	agentAskCommandEnv = "KPLUG_E2E_AGENT_ASK_COMMAND"
)

// agentHoldEnv makes the test binary hold agentHoldCountEnv idle connections to the agent
// at the socket it names, reopening each one the agent closes, until its stdin closes. It
// prints "held" once all are open, and at the end how many the agent closed.
const (
	agentHoldEnv      = "KPLUG_E2E_AGENT_HOLD"
	agentHoldCountEnv = "KPLUG_E2E_AGENT_HOLD_COUNT"
)

func init() {
	if socket := os.Getenv(agentHoldEnv); socket != "" {
		n, _ := strconv.Atoi(os.Getenv(agentHoldCountEnv))
		ctx, stop := context.WithCancel(context.Background()) //nolint:forbidigo // a helper process: no test here
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()
		fmt.Println(holdIdle(ctx, socket, n))
		os.Exit(0)
	}
	if socket := os.Getenv(agentAskEnv); socket != "" {
		answer, err := askAgentRaw(socket, agentRequestFrame(os.Getenv(agentAskCommandEnv)))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Print(answer)
		os.Exit(0)
	}
}

// holdIdle keeps n idle connections to socket open until ctx ends, reopening each one the
// agent closes, and returns how many it closed. It prints "held" once all n are open.
func holdIdle(ctx context.Context, socket string, n int) int {
	var wg sync.WaitGroup
	var opened sync.WaitGroup
	var mu sync.Mutex
	closed := 0
	opened.Add(n)
	for range n {
		wg.Go(func() {
			first := true
			for ctx.Err() == nil {
				c, err := net.DialTimeout("unix", socket, 5*time.Second)
				if err != nil {
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				if first {
					first = false
					opened.Done()
				}
				stop := context.AfterFunc(ctx, func() { _ = c.Close() })
				_, _ = io.Copy(io.Discard, c) // until the agent, or the end, closes it
				if stop() {
					mu.Lock()
					closed++
					mu.Unlock()
				}
				_ = c.Close()
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
			if first {
				opened.Done()
			}
		})
	}
	opened.Wait()
	fmt.Println("held")
	wg.Wait()
	return closed
}

// agentRequestFrame is a well-formed request of the agent's protocol (a 4-byte big-endian
// length, then JSON) for the command line, as kplug-exec-cache --agent sends it.
func agentRequestFrame(line ...string) []byte {
	info := `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}`
	body, _ := json.Marshal(map[string]any{"v": 1, "command": line[0], "args": line[1:], "info": info, "host": "elsewhere", "client": map[string]any{}})
	return frame(body)
}

func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// askAgentRaw sends req on a new connection to socket and returns the answer's JSON.
func askAgentRaw(socket string, req []byte) (string, error) {
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	// An agent that refuses without reading may have answered and closed already: the
	// write then fails, and the answer is still there to read.
	_, werr := c.Write(req)
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return "", fmt.Errorf("reading the answer's length: %w", errors.Join(err, werr))
	}
	if size := binary.BigEndian.Uint32(n[:]); size > 1<<20 {
		return "", fmt.Errorf("an answer of %d bytes", size)
	}
	body := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// rootAgent serves the kubeconfig of s (whose users wrap s.plugin) as this test's user,
// from s's cache.
func rootAgent(t *testing.T, s *execCacheSetup, home string) *agentProc {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "agent", "exec-cache.sock")
	serve := exec.CommandContext(context.WithoutCancel(t.Context()), s.kplug, "exec-cache", "--serve", "--agent", socket, "--cache-dir", s.cacheDir)
	serve.Env = hostEnv(home, "KUBECONFIG="+s.kubeconfig)
	return startAgent(t, serve, socket)
}

// TestExecCacheAgentSSH: the agent's socket forwarded with OpenSSH's ssh -R into an SSH
// session on loopback, where kubectl's exec block (kplug exec-cache) asks it through
// $KPLUG_EXEC_CACHE_AGENT: three commands authenticate with one run of the plugin. Once
// the session has ended, the same command in a new session fails, saying no agent answers
// and how to forward one.
func TestExecCacheAgentSSH(t *testing.T) {
	server := sshd.New(t)
	cp := framework.StartForTest(t, framework.Options{})
	s := newExecCacheSetup(t, cp)
	writeBytes(t, s.tokenFile, []byte(cp.TokenUser.Token))
	agent := rootAgent(t, s, t.TempDir())

	// The remote host's side: a home, a kubeconfig naming the plugin as the workstation's
	// does, and the path sshd listens on for the forwarded socket.
	remote := t.TempDir()
	remoteSocket := filepath.Join(remote, "agent.sock")
	kubeconfig := filepath.Join(remote, ".kube", "config")
	agentKubeconfig(t, cp, kubeconfig, s.kplug, map[string][]string{"agent": {s.plugin}})
	kubectl := sshd.Quote("env", "HOME="+remote, "XDG_CACHE_HOME="+filepath.Join(remote, ".cache"), "KUBECONFIG="+kubeconfig,
		"KPLUG_EXEC_CACHE_AGENT="+remoteSocket, filepath.Join(cp.BinDir, "kubectl"), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}{\"\\n\"}")

	out, errOut, err := server.Run(t, kubectl+" && "+kubectl+" && "+kubectl, "-R", remoteSocket+":"+agent.socket)
	if err != nil || out != "bob\nbob\nbob\n" {
		t.Fatalf("kubectl in the SSH session: %q, %v\n%s", out, err, errOut)
	}
	if n := s.runs(); n != 1 {
		t.Errorf("three kubectl commands in the SSH session ran the plugin %d times, want 1", n)
	}
	// The agent's peer is the ssh client that forwards the session's connections: the log
	// names it, and the remote's declared host.
	host, _ := os.Hostname()
	if lines := agent.logLines("answered", "ssh", host); len(lines) != 3 {
		t.Errorf("the agent logged %d answers naming the ssh client and host %q, want 3:\n%s", len(lines), host, agent.log())
	}

	if found := filesContaining(t, remote, cp.TokenUser.Token); len(found) > 0 {
		t.Errorf("the SSH session's side wrote the token to disk: %v", found)
	}

	server.WaitIdle(t)
	out, errOut, err = server.Run(t, kubectl)
	if err == nil || !strings.Contains(errOut, "no agent answers at "+remoteSocket) || !strings.Contains(errOut, "ssh -R") {
		t.Errorf("kubectl in a session without the forwarded socket: %q, %v; want an error that no agent answers at %s and how to forward it:\n%s", out, err, remoteSocket, errOut)
	}
	if n := s.runs(); n != 1 {
		t.Errorf("the plugin ran %d times, want 1", n)
	}
	agent.running(t)
}

// procUsage reads a process's resident memory (kB) and open file descriptors from /proc.
func procUsage(t *testing.T, pid int) (rssKB, fds int) {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return int(rss(t, pid) >> 10), len(entries)
}

// TestExecCacheAgentHostile: a remote of the agent's own user that misbehaves (garbage, a
// frame announcing 4 GiB, half a request then silence, a request whose answer it never
// reads, and 500 idle connections it keeps open, reopening any the agent closes) does not
// stop the agent from answering a real kubectl meanwhile and afterwards, and the agent's
// memory and open descriptors stay bounded and come back down once it leaves.
func TestExecCacheAgentHostile(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	s := newExecCacheSetup(t, cp)
	writeBytes(t, s.tokenFile, []byte(cp.TokenUser.Token))
	home := t.TempDir()
	agent := rootAgent(t, s, home)
	pid := agent.cmd.Process.Pid

	kubeconfig := filepath.Join(home, "remote-kubeconfig")
	agentKubeconfig(t, cp, kubeconfig, s.lean, map[string][]string{"agent": {s.plugin}}, "--agent", agent.socket)
	whoami := func(what string) {
		t.Helper()
		out, errOut, err := runEnv(t, hostEnv(home), filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig", kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		if err != nil || out != "bob" {
			t.Errorf("kubectl through the agent %s: %q, %v\n%s", what, out, err, errOut)
		}
	}
	whoami("before the hostile remote")
	rss0, fds0 := procUsage(t, pid)
	t.Logf("agent at rest: RSS %d kB, %d open descriptors", rss0, fds0)

	dial := func() net.Conn {
		c, err := net.DialTimeout("unix", agent.socket, 5*time.Second)
		if err != nil {
			t.Fatalf("dialling the agent: %v", err)
		}
		return c
	}
	var held []net.Conn
	defer func() {
		for _, h := range held {
			_ = h.Close()
		}
	}()
	hold := func(payload []byte) {
		c := dial()
		held = append(held, c)
		if len(payload) > 0 {
			// The agent may stop reading (or close) before all of it is written.
			_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Write(payload)
		}
	}
	// Garbage and a frame announcing 4 GiB (followed by a MiB of it) are refused with an
	// answer; the refusal of the frame comes from its length, before its body is read.
	for what, payload := range map[string][]byte{
		"garbage":                  bytes.Repeat([]byte("\x00\xffnot a frame{{{"), 4096),
		"a frame of garbage":       frame(bytes.Repeat([]byte("{not json"), 100)),
		"a frame announcing 4 GiB": append(binary.BigEndian.AppendUint32(nil, 0xffffffff), bytes.Repeat([]byte{'x'}, 1<<20)...),
	} {
		for range 5 {
			answer, err := askAgentRaw(agent.socket, payload)
			if err != nil || !strings.Contains(answer, "refused") || strings.Contains(answer, cp.TokenUser.Token) {
				t.Errorf("%s: answered %q, %v; want a refusal", what, answer, err)
			}
		}
	}
	req := agentRequestFrame(s.plugin)
	for range 10 {
		hold(req[:len(req)/2])
	}
	for range 10 {
		hold(req) // and never read the answer
	}

	// 500 idle connections from 10 processes, each connection reopened when the agent
	// closes it, until the processes' stdin closes: a remote of many processes (a dev
	// container's) that keeps its connections open.
	const holders, perHolder = 10, 50
	var procs []*exec.Cmd
	var stdins []io.Closer
	var outs []*bytes.Buffer
	defer func() {
		for _, c := range stdins {
			_ = c.Close()
		}
		for _, p := range procs {
			_ = p.Wait()
		}
	}()
	for range holders {
		p := exec.CommandContext(t.Context(), testBinary(t))
		p.Env = append(os.Environ(), agentHoldEnv+"="+agent.socket, agentHoldCountEnv+"="+strconv.Itoa(perHolder))
		p.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdin, err := p.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := p.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var rest bytes.Buffer
		p.Stderr = &rest
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		procs, stdins, outs = append(procs, p), append(stdins, stdin), append(outs, &rest)
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "held\n" {
			t.Fatalf("a process holding %d connections to the agent: %q, %v\n%s", perHolder, line, err, rest.String())
		}
		go func() { _, _ = io.Copy(&rest, stdout) }()
	}

	maxRSS, maxFDs := 0, 0
	for i := range 3 {
		whoami(fmt.Sprintf("while the hostile remote holds %d connections (%d)", holders*perHolder, i))
		rss, fds := procUsage(t, pid)
		maxRSS, maxFDs = max(maxRSS, rss), max(maxFDs, fds)
	}
	for _, c := range stdins {
		_ = c.Close()
	}
	reopened := 0
	for i, p := range procs {
		if err := p.Wait(); err != nil {
			t.Errorf("a process holding connections: %v\n%s", err, outs[i].String())
		}
		n, _ := strconv.Atoi(strings.TrimSpace(outs[i].String()))
		reopened += n
	}
	procs, stdins = nil, nil
	for _, h := range held {
		_ = h.Close()
	}
	held = nil
	t.Logf("under attack: RSS up to %d kB, up to %d open descriptors; the agent closed %d idle connections, reopened", maxRSS, maxFDs, reopened)
	// Generous bounds: the 4 GiB frames must not be allocated, nor a descriptor kept per
	// connection the hostile remote ever opened.
	if maxRSS > 256<<10 {
		t.Errorf("the agent's RSS reached %d kB under attack (at rest %d kB)", maxRSS, rss0)
	}
	if maxFDs > 2000 {
		t.Errorf("the agent held %d descriptors under attack (at rest %d)", maxFDs, fds0)
	}

	whoami("after the hostile remote left")
	poll.Until(t, "the agent's descriptors to come back down", func() bool {
		_, fds := procUsage(t, pid)
		return fds <= fds0+10
	})
	if n := s.runs(); n != 1 {
		t.Errorf("the plugin ran %d times, want 1", n)
	}
	agent.running(t)
}
