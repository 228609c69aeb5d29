package softhsm

import (
	"os"
	"path/filepath"
	"testing"
)

// NewTestToken initialises a token labelled label for t, sets $SOFTHSM2_CONF for the test,
// and writes the PIN to a file for pin-source=file:; or it skips t when SoftHSM2 is not
// installed, and fails it when $KPLUG_E2E_REQUIRED is set.
func NewTestToken(t testing.TB, label string) (tok *Token, pinFile string) {
	t.Helper()
	if _, err := Module(); err != nil {
		if os.Getenv("KPLUG_E2E_REQUIRED") != "" {
			t.Fatal(err)
		}
		t.Skipf("skipping PKCS#11 test: %v", err)
	}
	dir := t.TempDir()
	tok, err := NewToken(dir, label, "4711")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(ConfEnv, tok.Conf)
	pinFile = filepath.Join(dir, "pin")
	if err := os.WriteFile(pinFile, []byte(tok.PIN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tok, pinFile
}
