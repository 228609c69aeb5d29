package filelock

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTryLock: the lock belongs to an open of the file, so two opens in one process
// conflict, and closing the holder releases it.
func TestTryLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	a, b := open(), open()
	try := func(f *os.File, want bool) {
		t.Helper()
		if got, err := TryLock(f); got != want || err != nil {
			t.Fatalf("TryLock = %v, %v; want %v", got, err, want)
		}
	}
	try(a, true)
	try(b, false)
	if err := Unlock(a); err != nil {
		t.Fatal(err)
	}
	try(b, true)
	try(a, false)
	_ = b.Close()
	try(a, true)

	// A shared lock: refused while another open holds the exclusive one; shared with others.
	c := open()
	if got, err := TryRLock(c); got || err != nil {
		t.Fatalf("TryRLock while locked = %v, %v; want false", got, err)
	}
	if err := Unlock(a); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{c, open()} {
		if got, err := TryRLock(f); !got || err != nil {
			t.Fatalf("TryRLock = %v, %v; want true", got, err)
		}
	}
	try(a, false)
}
