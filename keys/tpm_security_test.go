//go:build linux

package keys_test

import (
	"crypto"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/localuser"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/swtpm"
	"github.com/kplug/kplug/keys"
)

// listenUnix listens on a socket at path that accepts connections and, if answer is false,
// never answers them; it is closed when t ends.
func listenUnix(t *testing.T, path string, answer bool) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = l.Close(); <-done })
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if answer {
				_ = c.Close()
				continue
			}
			conns = append(conns, c)
		}
	}()
}

// TestSecurityTPMDevice is F1 of the issue 30 review: the auth value goes to the TPM in
// the clear, so device= must be a TPM device or the user's own socket in a directory no
// one else can write to.
func TestSecurityTPMDevice(t *testing.T) {
	base, err := os.MkdirTemp("", "tpmdev")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })

	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	listenUnix(t, filepath.Join(open, "tpm"), true)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}

	others := filepath.Join(base, "others")
	if err := os.Mkdir(others, 0o700); err != nil {
		t.Fatal(err)
	}
	listenUnix(t, filepath.Join(others, "tpm"), true)
	worldSock := filepath.Join(others, "world")
	listenUnix(t, worldSock, true)
	if err := os.Chmod(worldSock, 0o777); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(others, "tpm")
	if os.Geteuid() == 0 {
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(filepath.Join(open, "tpm"), link); err != nil {
		t.Fatal(err)
	}

	cases := []struct{ device, want string }{
		{filepath.Join(open, "tpm"), "tpm: TPM socket " + open + "/tpm: its directory " + open + " has mode -rwxrwxrwx: other users can write to it"},
		{link, "tpm: TPM socket " + link + ": its directory " + open + " has mode -rwxrwxrwx: other users can write to it"},
		{worldSock, "tpm: TPM socket " + worldSock + ": its socket " + worldSock + " has mode -rwxrwxrwx: other users can write to it"},
		{"/dev/zero", "tpm: /dev/zero is a character device but not a TPM: want /dev/tpmN or /dev/tpmrmN"},
		{"/dev/tty", "tpm: /dev/tty is a character device but not a TPM: want /dev/tpmN or /dev/tpmrmN"},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, struct{ device, want string }{foreign, "tpm: TPM socket " + foreign + ": its socket " + foreign + " belongs to uid 65534, not to this user (uid 0)"})
	}
	for _, tc := range cases {
		if _, err := os.Stat(tc.device); err != nil {
			continue // no /dev/tty in some sandboxes
		}
		for _, o := range []keys.Options{{TPMDevice: tc.device}, {}} {
			uri := "tpm:handle=0x81000001"
			if o.TPMDevice == "" {
				uri += "?device=" + tc.device
			}
			_, _, err := keys.OpenSigner(uri, o)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("OpenSigner(%s, %+v) = %v, want %q...", uri, o, err, tc.want)
			}
		}
	}
}

// TestSecurityTPMPINSource is F4 of the issue 30 review: pin-source is read only from a
// regular file of at most 128 bytes, so that a FIFO cannot hang kplug nor a device fill
// its memory.
func TestSecurityTPMPINSource(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, "long")
	if err := os.WriteFile(long, []byte(strings.Repeat("x", 129)), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ source, want string }{
		{long, "tpm: reading the auth value of TPM key 0x81000001 from pin-source: " + long + " is larger than 128 bytes"},
		{fifo, "tpm: reading the auth value of TPM key 0x81000001 from pin-source: " + fifo + " is not a regular file"},
		{"/dev/zero", "tpm: reading the auth value of TPM key 0x81000001 from pin-source: /dev/zero is not a regular file"},
	} {
		_, _, err := keys.OpenSigner("tpm:handle=0x81000001?device=/nonexistent&pin-source=file:"+tc.source, keys.Options{})
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("pin-source=%s: OpenSigner = %v, want %q...", tc.source, err, tc.want)
		}
	}
}

// TestSecurityTPMSocketTimeout is F4 of the issue 30 review: a TPM socket that accepts a
// command and never answers is an error naming it, not a hang.
func TestSecurityTPMSocketTimeout(t *testing.T) {
	defer keys.SetTPMCommandTimeout(300 * time.Millisecond)()
	dir, err := os.MkdirTemp("", "tpmto")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "tpm")
	listenUnix(t, sock, false)
	_, _, err = keys.OpenSigner("tpm:handle=0x81000001?device="+sock, keys.Options{})
	want := "the TPM socket " + sock + " did not answer within 300ms: it is busy (swtpm serves one connection at a time, and another program holds it) or hung"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("OpenSigner(a socket that never answers) = %v, want ...%q...", err, want)
	}
}

// TestSecurityTPMKeySwapped is F3 of the issue 30 review: a password session does not
// bind the key, so another key put at the persistent handle after open would sign; kplug
// verifies every signature against the public key it opened, and refuses.
func TestSecurityTPMKeySwapped(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	mustTool(t, tpm, "createprimary", "-C", "o", "-G", "ecc", "-a", srkAttrs, "-c", "srk.ctx")
	for _, k := range []string{"a", "b"} {
		mustTool(t, tpm, "create", "-C", "srk.ctx", "-G", "ecc256", "-u", k+".pub", "-r", k+".priv", "-p", "1234")
		mustTool(t, tpm, "load", "-C", "srk.ctx", "-u", k+".pub", "-r", k+".priv", "-c", k+".ctx")
		mustTool(t, tpm, "flushcontext", "-t")
	}
	mustTool(t, tpm, "evictcontrol", "-C", "o", "-c", "a.ctx", "0x81000010")
	s, c, err := keys.OpenSigner("tpm:handle=0x81000010?device="+tpm.Socket, keys.Options{TPMPIN: "1234"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	signAndVerify(t, s, crypto.SHA256)

	mustTool(t, tpm, "evictcontrol", "-C", "o", "-c", "0x81000010")
	mustTool(t, tpm, "evictcontrol", "-C", "o", "-c", "b.ctx", "0x81000010")
	digest := sha256.Sum256([]byte("GET /api"))
	sig, err := s.Sign(nil, digest[:], crypto.SHA256)
	want := "tpm: TPM key 0x81000010 on " + tpm.Socket + ": the TPM's signature does not verify against the key's public key"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Sign with another key at the handle = %x, %v; want %q...", sig, err, want)
	}
}

// TestSecurityTPMSocketSwapped is N2 of the issue 30 second review: the socket was checked
// when the key was opened, and each later command dialled its path again, so another user
// who could replace it (through a directory of theirs above it) received the next
// TPM2_Sign with the key's auth value. Here root swaps another user's listening socket in
// after the open; the next signature must be refused before anything is sent.
func TestSecurityTPMSocketSwapped(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	attacker := localuser.New(t)
	dir := t.TempDir()
	pin := filepath.Join(dir, "pin")
	if err := os.WriteFile(pin, []byte("SECRETPIN"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "k.tss2")
	if _, err := keys.CreateTPMKey(key, keys.TPMKeyOptions{Device: tpm.Socket, PINSource: pin}); err != nil {
		t.Fatal(err)
	}
	s, c, err := keys.OpenSigner("tpm:file="+key+"?pin-source=file:"+pin, keys.Options{TPMDevice: tpm.Socket})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The attacker listens in a directory they may write, and records what arrives.
	evilDir, err := os.MkdirTemp("", "evil")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(evilDir) })
	if err := os.Chmod(evilDir, 0o777); err != nil {
		t.Fatal(err)
	}
	evil, got := filepath.Join(evilDir, "tpm"), filepath.Join(evilDir, "got")
	listener := attacker.Command(t.Context(), attacker.Executable(t, os.Args[0]))
	listener.Env = append(listener.Env, recordingListenerEnv+"="+evil, recordingListenerEnv+"_OUT="+got)
	if err := listener.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Process.Kill(); _ = listener.Wait() })
	poll.Until(t, "the attacker's socket", func() bool { _, err := os.Stat(evil + ".ready"); return err == nil })
	if err := os.Rename(evil, tpm.Socket); err != nil {
		t.Fatal(err)
	}

	digest := sha256.Sum256([]byte("GET /api"))
	_, err = s.Sign(nil, digest[:], crypto.SHA256)
	want := "tpm: TPM socket " + tpm.Socket + ": the process listening on it (pid "
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("belongs to uid %d, not to this user", attacker.UID)) {
		t.Errorf("Sign through another user's socket = %v, want %q...", err, want)
	}
	if b, _ := os.ReadFile(got); len(b) > 0 {
		t.Errorf("the attacker's socket received %d bytes (SECRETPIN in them: %v)", len(b), strings.Contains(string(b), "SECRETPIN"))
	}
}
