//go:build linux

package sshd

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/poll"
)

// TestSession logs in and runs a command with awkward arguments, then forwards a unix
// socket back with -R while the session lasts: what the exec-cache agent's tests rely on.
func TestSession(t *testing.T) {
	s := New(t)
	out, errOut, err := s.Run(t, Quote("printf", "%s|", "it's", "a b"))
	if err != nil || out != "it's|a b|" {
		t.Fatalf("ssh printf: %q, %v\n%s", out, err, errOut)
	}

	dir := t.TempDir()
	local, remote := filepath.Join(dir, "local.sock"), filepath.Join(dir, "remote.sock")
	l, err := net.Listen("unix", local)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("through the tunnel\n"))
			_ = c.Close()
		}
	}()
	// The session lasts until its stdin closes; meanwhile sshd listens on remote.
	session := s.Command(t.Context(), "cat", "-R", remote+":"+local)
	stdin, err := session.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var sessionErr bytes.Buffer
	session.Stderr = &sessionErr
	if err := session.Start(); err != nil {
		t.Fatal(err)
	}
	var got []byte
	poll.Until(t, "a greeting through "+remote, func() bool {
		c, err := net.DialTimeout("unix", remote, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		got, _ = io.ReadAll(c)
		return len(got) > 0
	})
	if string(got) != "through the tunnel\n" {
		t.Errorf("read %q through %s", got, remote)
	}
	_ = stdin.Close()
	if err := session.Wait(); err != nil {
		t.Fatalf("ssh -R %s:%s: %v\n%s", remote, local, err, sessionErr.String())
	}
	s.WaitIdle(t)
	if c, err := net.DialTimeout("unix", remote, time.Second); err == nil {
		_ = c.Close()
		t.Errorf("%s still answers after the session ended", remote)
	}
}
