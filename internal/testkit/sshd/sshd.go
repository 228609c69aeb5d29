//go:build linux

// Package sshd runs OpenSSH on loopback for tests: a real sshd with its own host key,
// config and authorized key in the test's directory, and a real ssh client that trusts
// only that host key and offers only that client key. Tests of what crosses an SSH session
// (a forwarded unix socket) use it as users do. It needs the Debian packages
// openssh-server and openssh-client, and root or the test's own account to log in to.
package sshd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/poll"
)

// Path is where Debian installs sshd; sshd must be started by an absolute path (it
// re-executes itself for each connection).
const Path = "/usr/sbin/sshd"

// Installed returns nil if sshd, ssh and ssh-keygen are installed, or an error saying what
// to install.
func Installed() error {
	var missing []string
	if _, err := os.Stat(Path); err != nil {
		missing = append(missing, "openssh-server ("+Path+")")
	}
	for _, c := range []string{"ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, "openssh-client ("+c+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("OpenSSH not installed (apt-get install openssh-server openssh-client, or hack/deps.sh; missing %s)", strings.Join(missing, ", "))
	}
	return nil
}

// Server is a running sshd on 127.0.0.1 that lets User log in with the key in Dir. Its
// methods are safe for concurrent use once New has returned.
type Server struct {
	Port int
	User string // the account ssh logs in to: the test's own
	Dir  string // keys, config, known_hosts and log

	key, knownHosts, logPath string
	cmd                      *exec.Cmd
	exited                   chan struct{}
	err                      error // of cmd.Wait, once exited is closed
}

// New starts an sshd for t and stops it, with every session it started, when t ends; or
// it skips t when OpenSSH is not installed (fails it when $KPLUG_E2E_REQUIRED is set).
// extraConfig lines are appended to the sshd_config.
func New(t testing.TB, extraConfig ...string) *Server {
	t.Helper()
	if err := Installed(); err != nil {
		if os.Getenv("KPLUG_E2E_REQUIRED") != "" {
			t.Fatal(err)
		}
		t.Skipf("skipping SSH test: %v", err)
	}
	s, err := start(t.TempDir(), extraConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sshd log:\n%s", s.Log())
		}
		s.Stop()
	})
	return s
}

func start(dir string, extraConfig []string) (*Server, error) {
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("sshd: who runs the test: %w", err)
	}
	s := &Server{User: u.Username, Dir: dir, key: filepath.Join(dir, "id_ed25519"), knownHosts: filepath.Join(dir, "known_hosts"), logPath: filepath.Join(dir, "sshd.log")}
	hostKey := filepath.Join(dir, "host_ed25519")
	for _, k := range []string{hostKey, s.key} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", filepath.Base(k), "-f", k).CombinedOutput(); err != nil { //nolint:noctx // bounded: it generates one key
			return nil, fmt.Errorf("sshd: ssh-keygen %s: %w: %s", k, err, out)
		}
	}
	clientPub, err := os.ReadFile(s.key + ".pub")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), clientPub, 0o600); err != nil {
		return nil, err
	}
	hostPub, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		// Privilege separation chroots into this directory, which Debian's package makes
		// only when its service starts (and a container never starts it).
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			return nil, fmt.Errorf("sshd: its privilege separation directory: %w", err)
		}
	}
	// A free port can be taken between choosing it and sshd binding it: try a few.
	for attempt := 0; ; attempt++ {
		s.Port, err = freePort()
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(s.knownHosts, []byte("[127.0.0.1]:"+strconv.Itoa(s.Port)+" "+string(hostPub)), 0o600); err != nil {
			return nil, err
		}
		config := filepath.Join(dir, "sshd_config")
		if err := os.WriteFile(config, []byte(s.config(hostKey, extraConfig)), 0o600); err != nil {
			return nil, err
		}
		err = s.run(config)
		if err == nil || attempt == 4 || !strings.Contains(s.Log(), "Address already in use") {
			return s, err
		}
	}
}

// config is an sshd_config for this server alone: nothing of the machine's /etc/ssh.
func (s *Server) config(hostKey string, extra []string) string {
	lines := []string{
		"ListenAddress 127.0.0.1:" + strconv.Itoa(s.Port),
		"HostKey " + hostKey,
		"PidFile " + filepath.Join(s.Dir, "sshd.pid"),
		"AuthorizedKeysFile " + filepath.Join(s.Dir, "authorized_keys"),
		"AuthenticationMethods publickey",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PermitRootLogin prohibit-password",
		"UsePAM no",
		// The test's directory is under /tmp, which everyone may write: the check of the
		// authorized keys' directories would refuse it.
		"StrictModes no",
		"AllowStreamLocalForwarding yes",
		"StreamLocalBindUnlink yes",
		"X11Forwarding no",
		"PermitTTY no",
		"PrintMotd no",
		"PrintLastLog no",
		"UseDNS no",
		"LogLevel VERBOSE",
	}
	return strings.Join(append(lines, extra...), "\n") + "\n"
}

// run starts sshd with config and waits until it answers with an SSH banner.
func (s *Server) run(config string) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	s.cmd = exec.Command(Path, "-D", "-e", "-f", config) //nolint:noctx // stopped by Stop
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("sshd: %w", err)
	}
	s.exited = make(chan struct{})
	go func() { s.err = s.cmd.Wait(); close(s.exited) }()
	deadline := time.After(10 * time.Second)
	for {
		if s.banner() == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("sshd exited at start: %w: %s", s.err, s.Log())
		case <-deadline:
			s.Stop()
			return fmt.Errorf("sshd: no SSH banner on 127.0.0.1:%d after 10s: %s", s.Port, s.Log())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// banner returns nil once sshd accepts on its port and greets with an SSH banner: a port
// someone else took would not.
func (s *Server) banner() error {
	c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(s.Port))
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "SSH-2.0-") {
		return fmt.Errorf("not sshd on port %d: %q", s.Port, line)
	}
	return nil
}

func freePort() (int, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("sshd: choosing a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Args are the ssh client's arguments for a session on s, before the remote command:
// nothing of ~/.ssh, the machine's ssh_config or an ssh-agent; only s's host key trusted,
// only its client key offered, and a failed -R or -L fails the session instead of a
// warning.
func (s *Server) Args(extra ...string) []string {
	args := []string{
		"-F", "/dev/null",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + s.knownHosts,
		"-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "IdentitiesOnly=yes",
		"-o", "IdentityAgent=none",
		"-o", "BatchMode=yes",
		"-o", "ExitOnForwardFailure=yes",
		"-o", "LogLevel=ERROR",
		"-i", s.key,
		"-p", strconv.Itoa(s.Port),
	}
	args = append(args, extra...)
	return append(args, s.User+"@127.0.0.1")
}

// Command is an ssh session on s that runs remoteCommand (a shell command line on the
// server: see Quote) with the extra ssh arguments (-R ...).
func (s *Server) Command(ctx context.Context, remoteCommand string, extra ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ssh", append(s.Args(extra...), "--", remoteCommand)...)
}

// Run runs remoteCommand in an ssh session on s, with the extra ssh arguments, and
// returns its output. A session that outlives a minute is killed and fails t.
func (s *Server) Run(t testing.TB, remoteCommand string, extra ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := s.Command(ctx, remoteCommand, extra...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ssh %s: no end after a minute: %s", remoteCommand, errOut.String())
	}
	return out.String(), errOut.String(), err
}

// Quote quotes args for the remote shell, as one command line.
func Quote(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// WaitIdle waits until every session of s has ended on the server's side too: the ssh
// client exits once it has the command's exit status, while the server's process for the
// connection may still be closing what it forwarded.
func (s *Server) WaitIdle(t testing.TB) {
	t.Helper()
	poll.Until(t, "sshd's sessions to end", func() bool { return len(descendants(s.cmd.Process.Pid)) == 0 })
}

// Log returns what sshd logged.
func (s *Server) Log() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// Stop stops sshd and every session process it started: sshd leaves a session running
// when it stops, in a session of its own, out of reach of its process group. Calling Stop
// again is harmless.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	for _, pid := range descendants(s.cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

// descendants lists the processes under pid, read from /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold spaces: the fields after its last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var all []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			all = append(all, c)
			queue = append(queue, c)
		}
	}
	return all
}
