package swtpm_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"os"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/testkit/swtpm"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStartStop checks that tpm2-tools reach the TPM and that Stop leaves no process.
func TestStartStop(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	out, err := tpm.Tool("getcap", "properties-fixed")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "TPM2_PT_FAMILY_INDICATOR") {
		t.Errorf("tpm2_getcap properties-fixed = %q, want TPM2_PT_FAMILY_INDICATOR", out)
	}
	if err := tpm.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := tpm.Tool("getcap", "properties-fixed"); err == nil {
		t.Error("tpm2_getcap after Stop succeeded, want an error")
	}
}

// TestKeyFile checks that a key file's public half is the key tpm2-tools made, in the
// TSS2 PEM file kplug reads.
func TestKeyFile(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	path, pub, err := tpm.KeyFile("k", "ecc256", "")
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := pub.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("public key %T, want an ECDSA P-256 key", pub)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "-----BEGIN TSS2 PRIVATE KEY-----\n") {
		t.Errorf("%s holds %q, want a TSS2 PRIVATE KEY", path, b)
	}
}
