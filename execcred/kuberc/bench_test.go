package kuberc

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkLoadAndCheck is what `kplug exec-cache` adds to every call when a kuberc with
// an allowlist exists: read and decode the file, validate, and check a command found in
// PATH against it.
func BenchmarkLoadAndCheck(b *testing.B) {
	home := b.TempDir()
	path := DefaultPath(home)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		b.Fatal(err)
	}
	data, err := readFixture("allowlist.yaml")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	b.Setenv("PATH", filepath.Dir(exe))
	b.ReportAllocs()
	for b.Loop() {
		l, err := Load(Options{Home: home})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Policy().Check(exe); err == nil {
			b.Fatal("allowed")
		}
	}
}
