//go:build linux || darwin

package execcache

import (
	"strings"
	"testing"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/wire"
)

// TestRunInteractive: when the client says the run is interactive, the wrapped plugin gets
// the terminal (for a login prompt); otherwise the null device.
func TestRunInteractive(t *testing.T) {
	t.Parallel()
	tty := terminal(t)
	for _, interactive := range []bool{true, false} {
		h := newHarness(t)
		h.opts.Stdin = tty
		b, err := execcred.ExecInfo(execcred.V1, interactive, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := h.call(kubectlA, wire.InfoEnv+"="+string(b))
		if want := "-tty=" + map[bool]string{true: "true", false: "false"}[interactive]; err != nil || !strings.Contains(out, want) {
			t.Errorf("interactive %v: %q, %v; want a token with %s", interactive, out, err, want)
		}
	}
}
