//go:build unix

package execcache

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// testIdentityFileSpecial: a FIFO, or a link to one or to a device, counts as not a
// regular file, at once: fileDigest never blocks on a FIFO nor reads a device.
func testIdentityFileSpecial(t *testing.T, dir string) {
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, to := range map[string]string{"to-fifo": fifo, "to-zero": "/dev/zero"} {
		if err := os.Symlink(to, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"fifo", "to-fifo", "to-zero"} {
		done := make(chan string, 1)
		go func() { done <- fileDigest(filepath.Join(dir, name)) }()
		select {
		case got := <-done:
			if got != digestNotRegular {
				t.Errorf("%s: %q, want %q", name, got, digestNotRegular)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: fileDigest blocked", name)
		}
	}
}
