//go:build linux

// Package localuser gives security tests a second, throw-away local user: the attacker on a
// shared host. It creates the user with useradd when the test runs as root, and deletes it
// when the test ends; without root it skips the test and says why.
package localuser

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// User is a local user that exists for one test.
type User struct {
	Name     string
	UID, GID int
	// Home is a directory of the user's own (0755, so that root can read what it left).
	Home string
}

// New creates a user for t, or skips t when it cannot (not root, no useradd).
func New(t testing.TB) *User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a second local user (the attacker of this test)")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("needs useradd to create a second local user: " + err.Error())
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "kplugt" + hex.EncodeToString(b)
	// useradd locks /etc/passwd; tests of other packages may hold it for a moment.
	var out []byte
	var err error
	for range 20 {
		out, err = exec.CommandContext(context.Background(), "useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "lock") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		for range 20 {
			out, err := exec.CommandContext(context.Background(), "userdel", name).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "lock") {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	home, err := os.MkdirTemp("", name+"-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(home) })
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, uid, gid); err != nil {
		t.Fatal(err)
	}
	return &User{Name: name, UID: uid, GID: gid, Home: home}
}

// Command returns a command that runs as u, with HOME and TMPDIR set to u.Home and the
// caller's other environment.
func (u *User) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID)}}
	cmd.Env = append(os.Environ(), "HOME="+u.Home, "TMPDIR="+u.Home)
	cmd.Dir = u.Home
	return cmd
}

// Sh runs script with sh -c as u and returns its stdout; a failure fails t.
func (u *User) Sh(t testing.TB, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := u.Command(ctx, "sh", "-c", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("as %s: sh -c %q: %v: %s", u.Name, script, err, stderr.String())
	}
	return string(out)
}

// Executable copies the executable at path into u.Home (0755), where u can run it: test
// binaries live in directories only root may enter.
func (u *User) Executable(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(u.Home, filepath.Base(path))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// String names the user for messages.
func (u *User) String() string { return fmt.Sprintf("%s (uid %d)", u.Name, u.UID) }
