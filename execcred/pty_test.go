//go:build linux || darwin

package execcred

import (
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/kplug/kplug/internal/testkit/exectest"
)

// TestInteractiveUnderRealTerminal gives the host a real pseudo-terminal as stdin and
// checks what the plugin gets in each mode, with the default terminal detection.
func TestInteractiveUnderRealTerminal(t *testing.T) {
	t.Parallel()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()

	tests := []struct {
		mode        InteractiveMode
		unavailable bool
		wantToken   string
		wantInfo    string
		wantErr     string
	}{
		{IfAvailable, false, "tty=true", `"interactive":true`, ""},
		{Never, false, "tty=false", `"interactive":false`, ""},
		{IfAvailable, true, "tty=false", `"interactive":false`, ""},
		{Always, false, "tty=true", `"interactive":true`, ""},
		{Always, true, "", "", "exec plugin cannot support interactive mode: standard input is unavailable: used by stdin resource manifest reader"},
	}
	for _, tt := range tests {
		// The plugin answers with a token saying whether its stdin is a terminal.
		f := exectest.New(t).Stdout(`{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tty={{.TTY}}"}}`)
		cfg := fakeConfig(f, V1)
		cfg.InteractiveMode = tt.mode
		host := quietHost()
		host.IsTerminal = nil // the real check, on the real terminal
		host.Stdin = tty
		host.StdinUnavailable = tt.unavailable
		host.StdinUnavailableMessage = "used by stdin resource manifest reader"
		cred, err := newSource(t, cfg, Options{Plugin: host}).Credential(t.Context(), nil)
		if tt.wantErr != "" {
			if err == nil || !strings.HasSuffix(err.Error(), tt.wantErr) || f.Runs() != 0 {
				t.Errorf("%s unavailable=%v: err %v after %d runs, want %q and no run", tt.mode, tt.unavailable, err, f.Runs(), tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.mode, err)
		}
		seen := infos(f)
		if cred.Token != tt.wantToken || len(seen) != 1 || !strings.Contains(seen[0], tt.wantInfo) {
			t.Errorf("%s unavailable=%v: plugin saw %s with %v, want %s and %s", tt.mode, tt.unavailable, cred.Token, seen, tt.wantToken, tt.wantInfo)
		}
	}
}
