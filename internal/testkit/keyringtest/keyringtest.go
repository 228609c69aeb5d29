//go:build linux

// Package keyringtest gives tests real OS keyrings to store credentials in: a Secret
// Service (gnome-keyring-daemon, as Debian ships it) on a private D-Bus session bus that
// the test starts and stops, so no test touches a desktop's keyring. The Debian packages
// come from hack/deps.sh; without them a test skips and says why, or fails when
// KPLUG_E2E_REQUIRED is set (CI).
package keyringtest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/testlog"
)

// RequireEnv names the variable that turns a missing tool into a failure instead of a
// skip.
const RequireEnv = "KPLUG_E2E_REQUIRED"

// Password unlocks the test's login keyring.
const Password = "kplug-test-password"

// Require skips t because of why, or fails it when RequireEnv is set.
func Require(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s (install with `make deps`)", why)
	}
	t.Skipf("skipping: %s (install with `make deps`)", why)
}

// SecretService is a running gnome-keyring-daemon with its login keyring unlocked, on a
// session bus of its own.
type SecretService struct {
	// Address is the bus's DBUS_SESSION_BUS_ADDRESS.
	Address string
	// Env is what a client needs to find this Secret Service (and only it).
	Env []string
	// Dir holds the bus socket and the daemon's files.
	Dir string
}

// StartSecretService starts a private session bus and gnome-keyring-daemon (secrets
// component only) on it, unlocked with Password, and stops both when t ends, killing
// whatever they started.
func StartSecretService(t testing.TB) *SecretService {
	t.Helper()
	for _, tool := range []string{"dbus-daemon", "gnome-keyring-daemon"} {
		if _, err := exec.LookPath(tool); err != nil {
			Require(t, "the Secret Service tests need "+tool)
		}
	}
	// Socket paths are limited to about 100 bytes, more than t.TempDir may give.
	dir, err := os.MkdirTemp("", "kplug-ss-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &SecretService{Dir: dir}
	bus := StartBus(t, dir)
	s.Address = bus
	s.Env = []string{"DBUS_SESSION_BUS_ADDRESS=" + bus, "XDG_RUNTIME_DIR=" + dir}

	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), "gnome-keyring-daemon", "--foreground", "--unlock", "--components=secrets")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data"),
		"XDG_CONFIG_HOME="+filepath.Join(home, "config"), "XDG_RUNTIME_DIR="+dir, "DBUS_SESSION_BUS_ADDRESS="+bus)
	cmd.Stdin = strings.NewReader(Password) // --unlock reads it until EOF
	StartDaemon(t, cmd, "gnome-keyring-daemon")
	waitReady(t, bus)
	return s
}

// StartBus starts a D-Bus session bus listening in dir, with no services to start on
// demand, and stops it when t ends; it returns its address.
func StartBus(t testing.TB, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		Require(t, "the Secret Service tests need dbus-daemon")
	}
	conf := filepath.Join(dir, "bus.conf")
	err := os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=`+filepath.Join(dir, "bus")+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), "dbus-daemon", "--config-file="+conf, "--nofork", "--print-address=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	StartDaemon(t, cmd, "dbus-daemon")
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon printed no address: %v", err)
	}
	return strings.TrimSpace(addr)
}

// StartDaemon starts cmd in a process group of its own and, when t ends, stops the group
// (SIGTERM, then SIGKILL after a few seconds) and waits for cmd. Its stderr is logged if
// t failed. The returned channel is closed when cmd exits, so that a caller waiting for
// the daemon to be ready can stop waiting when it died instead.
func StartDaemon(t testing.TB, cmd *exec.Cmd, name string) <-chan struct{} {
	t.Helper()
	var stderr testlog.Buffer
	cmd.Stderr = &stderr
	// Pdeathsig: a test binary killed by its timeout takes the daemon with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		pgid := cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
		// Whatever it started in its group goes too.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, stderr.String())
		}
	})
	return done
}

// waitReady waits until the bus has a Secret Service whose default collection exists.
func waitReady(t testing.TB, bus string) {
	t.Helper()
	conn, err := dbus.Connect(bus)
	if err != nil {
		t.Fatalf("connecting to the test bus: %v", err)
	}
	defer conn.Close()
	poll.Until(t, "gnome-keyring-daemon's login collection on the test bus", func() bool {
		var alias dbus.ObjectPath
		err := conn.Object("org.freedesktop.secrets", "/org/freedesktop/secrets").
			Call("org.freedesktop.Secret.Service.ReadAlias", 0, "default").Store(&alias)
		return err == nil && alias != "/"
	})
}
