package swtpm

import (
	"os"
	"testing"
)

// NewTestTPM starts a fresh TPM for t and stops it when t ends; or it skips t when swtpm or
// tpm2-tools is not installed, and fails it when $KPLUG_E2E_REQUIRED is set.
func NewTestTPM(t testing.TB) *TPM {
	t.Helper()
	if err := Installed(); err != nil {
		if os.Getenv("KPLUG_E2E_REQUIRED") != "" {
			t.Fatal(err)
		}
		t.Skipf("skipping TPM test: %v", err)
	}
	// Not t.TempDir: its path, named for the test, can exceed the unix socket limit.
	dir, err := os.MkdirTemp("", "swtpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	tpm, err := Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tpm.Stop() })
	return tpm
}
