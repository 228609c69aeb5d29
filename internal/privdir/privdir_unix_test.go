//go:build unix

package privdir

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestEnsure(t *testing.T) {
	t.Run("creates 0700", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "b")
		if err := Ensure(dir); err != nil {
			t.Fatal(err)
		}
		assertMode(t, dir, 0o700)
	})
	t.Run("narrows a readable directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "d")
		mustMkdir(t, dir, 0o755)
		if err := Ensure(dir); err != nil {
			t.Fatal(err)
		}
		assertMode(t, dir, 0o700)
	})
	t.Run("refuses a writable directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "d")
		mustMkdir(t, dir, 0o777)
		wantErr(t, Ensure(dir), "other users can write to it")
	})
	t.Run("refuses a symbolic link to a directory", func(t *testing.T) {
		tmp := t.TempDir()
		target := filepath.Join(tmp, "target")
		mustMkdir(t, target, 0o700)
		link := filepath.Join(tmp, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		wantErr(t, Ensure(link), "is a symbolic link")
	})
	t.Run("refuses a file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		wantErr(t, Ensure(path), "is not a directory")
	})
	// Finding 1 of issue 12: a directory another user created first.
	t.Run("refuses another user's directory", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a directory to another user")
		}
		dir := filepath.Join(t.TempDir(), "d")
		mustMkdir(t, dir, 0o700)
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		wantErr(t, Ensure(dir), "belongs to uid 65534, not to this user")
	})
}

// TestVerifyChangesNothing: Verify, for directories another program chose, refuses what
// Check refuses but leaves a readable directory as it is.
func TestVerifyChangesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	mustMkdir(t, dir, 0o755)
	if err := Verify(dir); err != nil {
		t.Fatal(err)
	}
	assertMode(t, dir, 0o755)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	wantErr(t, Verify(dir), "other users can write to it")
	wantErr(t, Verify(filepath.Join(dir, "absent")), "no such file or directory")
}

func TestCreateRefusesExisting(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "x.log")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(link); err == nil {
		t.Fatal("Create wrote through a symbolic link")
	}
	if _, err := Replace(link); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Replace: got %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("the link's target was changed to %q", b)
	}
	f, err := Create(filepath.Join(dir, "new"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	assertMode(t, f.Name(), 0o600)
	f, err = Replace(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestOpenRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Open(fifo)
		done <- err
	}()
	select {
	case err := <-done:
		wantErr(t, err, "is not a regular file")
	case <-time.After(10 * time.Second):
		t.Fatal("Open blocked on a FIFO")
	}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_, err := Open(link)
	wantErr(t, err, "is a symbolic link")
	b, err := ReadFile(target, 6)
	if err != nil || string(b) != "secret" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	_, err = ReadFile(target, 5)
	wantErr(t, err, "larger than 5 bytes")
}

// OpenLinked follows a link, as a dotfiles manager's, but only to a regular file: a link
// to a FIFO is refused without blocking, and one to a device too.
func TestOpenLinked(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("config"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, to := range map[string]string{"link": target, "to-fifo": fifo, "to-device": os.DevNull} {
		if err := os.Symlink(to, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := OpenLinked(filepath.Join(dir, "link"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil || string(b) != "config" {
		t.Errorf("through the link: %q, %v", b, err)
	}
	for _, name := range []string{"to-fifo", "to-device"} {
		done := make(chan error, 1)
		go func() {
			f, err := OpenLinked(filepath.Join(dir, name))
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			wantErr(t, err, "is not a regular file")
		case <-time.After(10 * time.Second):
			t.Fatalf("OpenLinked blocked on %s", name)
		}
	}
}

func mustMkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != want {
		t.Fatalf("%s has mode %v, want %v", path, got, want)
	}
}

func wantErr(t *testing.T, err error, substr string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), substr) {
		t.Fatalf("got error %v, want one containing %q", err, substr)
	}
}

func TestAncestors(t *testing.T) {
	base := t.TempDir()
	sticky := filepath.Join(base, "sticky")
	mustMkdir(t, sticky, 0o777|os.ModeSticky)
	shared := filepath.Join(base, "shared")
	mustMkdir(t, shared, 0o777)
	for _, dir := range []string{filepath.Join(sticky, "mine"), filepath.Join(shared, "mine")} {
		mustMkdir(t, dir, 0o700)
	}
	if err := Ancestors(filepath.Join(sticky, "mine"), os.Geteuid()); err != nil {
		t.Errorf("under a sticky directory: %v", err)
	}
	wantErr(t, Ancestors(filepath.Join(shared, "mine"), os.Geteuid()), shared+" is writable by other users (mode -rwxrwxrwx), so what is in it could be replaced")
	wantErr(t, Ancestors(filepath.Join(base, "missing"), os.Geteuid()), "no such file or directory")
	if os.Geteuid() == 0 {
		other := filepath.Join(base, "other")
		mustMkdir(t, other, 0o755)
		if err := os.Chown(other, 12345, 12345); err != nil {
			t.Fatal(err)
		}
		wantErr(t, Ancestors(other, 0), other+" is owned by uid 12345, neither root nor uid 0")
	}
}

// TestAncestorsOfRelativeAndLinkedDirs: a relative dir is checked up to the root, not to
// the working directory; a link to a safe directory is followed (a cache directory kept
// elsewhere), and one to a directory under a shared one is refused.
func TestAncestorsOfRelativeAndLinkedDirs(t *testing.T) {
	base := t.TempDir()
	shared := filepath.Join(base, "shared")
	mustMkdir(t, shared, 0o777)
	mustMkdir(t, filepath.Join(shared, "mine"), 0o700)
	mustMkdir(t, filepath.Join(shared, "mine", "sock"), 0o700)
	t.Chdir(filepath.Join(shared, "mine"))
	wantErr(t, Ancestors("sock", os.Geteuid()), shared+" is writable by other users")
	wantErr(t, Ancestors(".", os.Geteuid()), shared+" is writable by other users")

	safe := filepath.Join(base, "safe")
	mustMkdir(t, safe, 0o700)
	mustMkdir(t, filepath.Join(safe, "cache"), 0o700)
	home := filepath.Join(base, "home")
	mustMkdir(t, home, 0o700)
	if err := os.Symlink(filepath.Join(safe, "cache"), filepath.Join(home, ".cache")); err != nil {
		t.Fatal(err)
	}
	if err := Ancestors(filepath.Join(home, ".cache"), os.Geteuid()); err != nil {
		t.Errorf("a link to a safe directory: %v", err)
	}
	if err := os.Symlink(filepath.Join(shared, "mine"), filepath.Join(home, "unsafe")); err != nil {
		t.Fatal(err)
	}
	wantErr(t, Ancestors(filepath.Join(home, "unsafe"), os.Geteuid()), filepath.Join(home, "unsafe")+" links to "+filepath.Join(shared, "mine")+": "+shared+" is writable by other users")
	if os.Geteuid() == 0 {
		link := filepath.Join(home, "theirs")
		if err := os.Symlink(filepath.Join(safe, "cache"), link); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(link, 12345, 12345); err != nil {
			t.Fatal(err)
		}
		wantErr(t, Ancestors(link, 0), link+" is owned by uid 12345, neither root nor uid 0")
	}
}
