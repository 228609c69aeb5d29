package swtpm_test

import (
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
