package execcache

import (
	"bytes"
	connlist "container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kplug/kplug/execcred/kuberc"
	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/peercred"
	"github.com/kplug/kplug/internal/privdir"
)

// Bounds of the agent against a remote that misbehaves. A connection must send its
// request within agentReadTimeout; at most agentMaxWaiting connections wait for theirs, and
// when one more arrives the one that has waited longest is closed: a client sends its
// request as soon as it connects, so idle connections, however many processes hold them,
// cannot keep it out. At most agentMaxServing requests are answered at once, and at most
// agentMaxPerLine for one command line (beyond them a request is told the agent is busy):
// requests for a plugin that is running wait for its run, and a remote that sends many
// while a login lasts fills only that line's share. An answer must be read within
// agentWriteTimeout.
const (
	agentReadTimeout  = 10 * time.Second
	agentWriteTimeout = 10 * time.Second
	agentMaxWaiting   = 512
	agentMaxServing   = 1024
	agentMaxPerLine   = 64
)

// agentRefreshAfter bounds how often a remote's refresh (a second call as the same client,
// after a 401) runs a plugin again: a remote can claim any client. A variable for tests.
var agentRefreshAfter = 10 * time.Second

// agent serves the cache to remotes: `kplug exec-cache --serve`.
type agent struct {
	c           *Command
	dir         string // the cache directory
	environ     []string
	accountHome string
	stderr      io.Writer
	log         *slog.Logger
	uid         uint32

	mu      sync.Mutex
	waiting *connlist.List // of net.Conn, the oldest first
	serving int
	perLine map[string]int // requests being answered, by command line
}

// DefaultAgentSocket is where --serve listens without --agent: beside the cache directory,
// in a directory of its own.
func DefaultAgentSocket(cacheDir string) string {
	return filepath.Join(filepath.Dir(cacheDir), "agent", "exec-cache.sock")
}

// runAgent listens on socket until ctx is done, answering the calls remotes forward to it.
func (c *Command) runAgent(ctx context.Context, dir, socket string, p Process) error {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		return fmt.Errorf("exec-cache --serve: the agent tells who connects by the peer's credentials on its socket, which %s does not give: run it on Linux or macOS", runtime.GOOS)
	}
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The configuration must be readable now, not at the first remote's call.
	if _, err := loadAgentConfig(p.Environ); err != nil {
		return &UsageError{Err: fmt.Errorf("exec-cache --serve: %w", err)}
	}
	// Absolute, for the directories checked above it and for the forward printed below,
	// which ssh and bind mounts resolve from elsewhere.
	socket, err := filepath.Abs(socket)
	if err != nil {
		return fmt.Errorf("exec-cache --serve: %w", err)
	}
	ln, mine, err := listenAgent(socket)
	if err != nil {
		return err
	}
	euid := os.Geteuid()
	if euid < 0 {
		return fmt.Errorf("exec-cache --serve: no user id on %s", runtime.GOOS)
	}
	a := &agent{
		c: c, dir: dir, environ: p.Environ, accountHome: p.AccountHome, stderr: p.Stderr, log: log,
		uid: uint32(euid), waiting: connlist.New(), //nolint:gosec // checked not negative above
	}
	log.Info("exec-cache agent: listening on "+socket, "cache", dir)
	fmt.Fprintf(p.Stderr, "exec-cache agent: forward it with `ssh -R /home/<you>/.kplug-agent.sock:%s HOST` (a path in a directory of yours there; "+
		"then export %s=/home/<you>/.kplug-agent.sock there), or bind-mount %s into a dev container; stop with Ctrl-C\n", socket, AgentEnv, filepath.Dir(socket))

	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var acceptErr error
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				acceptErr = fmt.Errorf("exec-cache agent: accepting on %s: %w", socket, err)
			}
			break
		}
		wg.Go(func() { a.handle(ctx, conn) })
	}
	_ = ln.Close()
	removeOwnSocket(socket, mine)
	wg.Wait()
	log.Info("exec-cache agent: stopped")
	return acceptErr
}

// listenAgent listens on socket, in a private directory (created if missing): nobody else
// may reach, replace or remove the socket. A socket something still answers on is not
// taken over; a stale one (refused) is replaced.
func listenAgent(socket string) (*net.UnixListener, os.FileInfo, error) {
	dir := filepath.Dir(socket)
	if err := privdir.Ensure(dir); err != nil {
		return nil, nil, fmt.Errorf("exec-cache --serve: the socket's directory: %w", err)
	}
	// The directories above too: one another user could rename lets them put their own
	// socket where forwards and clients look for the agent's.
	if err := privdir.Ancestors(filepath.Dir(dir), os.Geteuid()); err != nil {
		return nil, nil, fmt.Errorf("exec-cache --serve: the socket's directory: %w", err)
	}
	if info, err := os.Lstat(socket); err == nil {
		if info.Mode().Type() != fs.ModeSocket {
			return nil, nil, fmt.Errorf("exec-cache --serve: %s exists and is not a socket: remove it or pass another --agent", socket)
		}
		d := net.Dialer{Timeout: time.Second}
		conn, err := d.DialContext(context.Background(), "unix", socket)
		if err == nil {
			_ = conn.Close()
			return nil, nil, fmt.Errorf("exec-cache --serve: an agent already listens on %s", socket)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, fmt.Errorf("exec-cache --serve: %s exists and cannot be checked: %w", socket, err)
		}
		if err := os.Remove(socket); err != nil {
			return nil, nil, fmt.Errorf("exec-cache --serve: removing the stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("exec-cache --serve: listening on %s: %w", socket, err)
	}
	ln.SetUnlinkOnClose(false) // removeOwnSocket removes it only if it is still this one
	if err := os.Chmod(socket, 0o600); err != nil {
		_ = ln.Close()
		return nil, nil, fmt.Errorf("exec-cache --serve: %w", err)
	}
	info, err := os.Lstat(socket)
	if err != nil {
		_ = ln.Close()
		return nil, nil, fmt.Errorf("exec-cache --serve: %w", err)
	}
	return ln, info, nil
}

// removeOwnSocket removes the socket file on the way out, if it is still the one this
// agent created (mine), not one another agent put in its place.
func removeOwnSocket(socket string, mine os.FileInfo) {
	if now, err := os.Lstat(socket); err == nil && os.SameFile(now, mine) {
		_ = os.Remove(socket)
	}
}

// handle serves one connection: who it is, one request, one answer.
func (a *agent) handle(ctx context.Context, conn net.Conn) {
	defer func() { _ = conn.Close() }()
	cred, err := peercred.Of(conn)
	if err != nil {
		a.log.Warn("exec-cache agent: refusing a connection whose peer cannot be read", "err", err)
		return
	}
	who := []any{"peerPID", cred.PID, "peerUID", cred.UID, "peer", processName(cred.PID)}
	if cred.UID != a.uid {
		a.log.Warn("exec-cache agent: refused a connection from another user", who...)
		a.reply(conn, agentAnswer{Error: fmt.Sprintf("refused: this agent answers its own user (uid %d) only, and the connection came from uid %d", a.uid, cred.UID)})
		return
	}
	waiting := a.wait(conn)
	_ = conn.SetReadDeadline(time.Now().Add(agentReadTimeout))
	frame, err := readFrame(conn, maxAgentRequest)
	a.waited(waiting)
	if errors.Is(err, io.EOF) {
		a.log.Debug("exec-cache agent: a connection closed without a request", who...)
		return
	}
	if err != nil {
		a.log.Warn("exec-cache agent: no request read", append(who, "err", err)...)
		if errors.Is(err, errFrameTooLarge) {
			a.reply(conn, agentAnswer{Error: "refused: " + err.Error()})
		}
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	var req agentRequest
	dec := json.NewDecoder(bytes.NewReader(frame))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Version != agentVersion || req.Command == "" {
		a.log.Warn("exec-cache agent: refused a malformed request", who...)
		a.reply(conn, agentAnswer{Error: fmt.Sprintf("refused: not a request of this agent's protocol (version %d)", agentVersion)})
		return
	}
	who = append(who, "remoteHost", clip(req.Host, 64), "remoteClientPID", req.Client.PID)
	line := strings.Join(append([]string{req.Command}, req.Args...), "\x00")
	if !a.acquire(line) {
		a.log.Warn("exec-cache agent: too many requests at once; turning one away", who...)
		a.reply(conn, agentAnswer{Error: "the agent is busy: too many requests at once; retry"})
		return
	}
	defer a.release(line)
	ans, cmdline := a.answer(ctx, &req)
	who = append(who, "command", cmdline)
	if ans.Error != "" {
		a.log.Warn("exec-cache agent: refused", append(who, "why", ans.Error)...)
	} else {
		a.log.Info("exec-cache agent: answered", who...)
	}
	a.reply(conn, ans)
}

// wait records conn as waiting for its request, closing the connection that has waited
// longest if there are too many.
func (a *agent) wait(conn net.Conn) *connlist.Element {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiting.Len() >= agentMaxWaiting {
		oldest := a.waiting.Remove(a.waiting.Front()).(net.Conn)
		_ = oldest.Close()
	}
	return a.waiting.PushBack(conn)
}

// waited records that a connection is no longer waiting (it sent its request, failed, or
// was closed to make room).
func (a *agent) waited(e *connlist.Element) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waiting.Remove(e) // a no-op for one closed to make room
}

// acquire counts a request for line in, if the bounds allow it.
func (a *agent) acquire(line string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.serving >= agentMaxServing || a.perLine[line] >= agentMaxPerLine {
		return false
	}
	if a.perLine == nil {
		a.perLine = map[string]int{}
	}
	a.serving++
	a.perLine[line]++
	return true
}

func (a *agent) release(line string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.serving--
	if a.perLine[line]--; a.perLine[line] == 0 {
		delete(a.perLine, line)
	}
}

// reply writes the answer, giving up on a remote that does not read it in time.
func (a *agent) reply(conn net.Conn, ans agentAnswer) {
	body, err := json.Marshal(ans)
	if err != nil {
		return
	}
	_ = conn.SetWriteDeadline(time.Now().Add(agentWriteTimeout))
	if err := writeFrame(conn, body); err != nil {
		a.log.Debug("exec-cache agent: the answer was not delivered", "err", err)
	}
}

// answer runs the call as the workstation's kubeconfig names it, through the cache, and
// returns the answer with the command line to log (its arguments redacted).
func (a *agent) answer(ctx context.Context, req *agentRequest) (agentAnswer, string) {
	cmdline := strings.Join(append([]string{clip(req.Command, 256)}, redactArgs(req.Args)...), " ")
	info, err := wire.LoadInfo(req.Info)
	if err != nil {
		return agentAnswer{Error: "refused: " + err.Error()}, cmdline
	}
	if info.HTTPSignature != nil {
		return agentAnswer{Error: "refused: the client signs its requests (KEP-6308 httpSignature), and the agent never sends signing material: sign on the machine that holds the key"}, cmdline
	}
	cfg, err := loadAgentConfig(a.environ)
	if err != nil {
		return agentAnswer{Error: err.Error()}, cmdline
	}
	n, err := cfg.find(req.Command, req.Args, info.Cluster)
	if err != nil {
		return agentAnswer{Error: "refused: " + err.Error()}, cmdline
	}
	// The plugin is told what the workstation's kubeconfig says, and runs without a
	// terminal: a login it needs happens here, where the browser is.
	plugin := &wire.Info{APIVersion: info.APIVersion, Cluster: n.Cluster, Response: info.Response}
	encoded, err := plugin.Encode()
	if err != nil {
		return agentAnswer{Error: err.Error()}, cmdline
	}
	env := make([]string, 0, len(a.environ)+len(n.Env)+1)
	for _, kv := range a.environ {
		name, _, _ := strings.Cut(kv, "=")
		if envName(name) != envName(AgentEnv) && envName(name) != envName(wire.InfoEnv) {
			env = append(env, kv)
		}
	}
	env = append(env, n.Env...)
	env = append(env, wire.InfoEnv+"="+strings.TrimSuffix(string(encoded), "\n"))
	policies, err := a.c.loadKuberc(Process{Environ: a.environ, Caller: Caller{Environ: a.environ}, AccountHome: a.accountHome, Log: a.log})
	if err != nil {
		return agentAnswer{Error: err.Error()}, cmdline
	}
	// The policies add up: the block's own --kuberc too, as when the block runs here.
	if n.Kuberc != "" {
		l, err := kuberc.Load(kuberc.Options{Path: n.Kuberc})
		if err != nil {
			return agentAnswer{Error: fmt.Sprintf("the --kuberc of the workstation's exec block: %v", err)}, cmdline
		}
		if l.Preference != nil {
			policies = append(policies, FilePolicy{Policy: l.Policy(), File: l.Path})
		}
	}
	var out bytes.Buffer
	err = Run(ctx, Options{
		Command: n.Command, Args: n.Args, Dir: a.dir, Storage: a.c.storage, Skew: orNone(a.c.skew),
		DefaultTTL: a.c.defaultTTL, LockTimeout: a.c.lockTimeout, Timeout: a.c.timeout,
		KeyEnv: KeyEnv{Ignore: a.c.ignoreEnv, Declare: a.c.keyEnv}, Failures: orNone(a.c.failures),
		Environ: env, Stdout: &out, Stderr: a.stderr, Log: a.log, Policies: policies,
		// The remote's client, kept apart from this machine's processes: a second call from
		// it is a refresh, as for a local client.
		Client:       remoteClient(req.Host, req.Client),
		Caller:       Caller{Environ: a.environ},
		RefreshAfter: agentRefreshAfter,
	})
	var exitErr *execplugin.ExitError
	var recent *RecentFailureError
	// The plugin's stderr went to this agent's stderr, where its user reads it; its tail,
	// which a failing login may fill with a refresh token or a device code, stays here
	// (and no "its stderr is above", which is not so on the remote).
	var timeoutErr *execplugin.TimeoutError
	if errors.As(err, &exitErr) {
		exitErr.Stderr = ""
	}
	if errors.As(err, &timeoutErr) {
		timeoutErr.Stderr = ""
	}
	switch {
	case errors.As(err, &recent):
		return agentAnswer{Error: recent.Error(), Code: recent.ExitCode()}, cmdline
	case errors.As(err, &exitErr):
		return agentAnswer{Error: fmt.Sprintf("the workstation's %s failed (%v); its output is in the agent's log there", n.Command, exitErr), Code: exitErr.Code}, cmdline
	case err != nil:
		return agentAnswer{Error: err.Error()}, cmdline
	}
	status, err := wire.Decode(info.APIVersion, out.Bytes())
	if err != nil {
		return agentAnswer{Error: "the workstation's plugin answered no valid ExecCredential: " + err.Error()}, cmdline
	}
	if why := status.Unstorable(); why != "" {
		return agentAnswer{Error: "refused: the answer is not sent to a remote: " + why}, cmdline
	}
	if out.Len() > maxAgentAnswer-1024 {
		return agentAnswer{Error: fmt.Sprintf("the answer is %d bytes, more than the agent sends", out.Len())}, cmdline
	}
	return agentAnswer{Stdout: out.Bytes()}, cmdline
}

// remoteClient is the Client a remote's call counts as: the pid it declares, marked as a
// remote's and with the host it declares, so that it is never taken for a process here.
// Not with the local process it came through: through a bind mount, that is the remote's
// own kplug-exec-cache, a new one for each call, and a client's second call after a 401
// would never be seen as a refresh.
func remoteClient(host string, c Client) Client {
	if c.PID <= 0 {
		return Client{}
	}
	return Client{PID: c.PID, Start: fmt.Sprintf("remote %s: %s", clip(host, 64), clip(c.Start, 64))}
}

// clip bounds a string a remote declared, for logs and entries.
func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

// processName names the process behind a connection for the log (its executable), or ""
// where it cannot be read.
func processName(pid int32) string {
	if runtime.GOOS != "linux" || pid <= 0 {
		return ""
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return ""
	}
	return exe
}
