package execcred

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/execcred/plugin"
	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

const sdkMessage = "the SSO session expired; run: my-login --sso"

// sdkStatusPlugin fails, as a plugin author would make it fail, with a *plugin.StatusError:
// plugin.Main prints the status on stdout, the message on stderr, and exits 1.
func sdkStatusPlugin() int {
	plugin.Main(func(context.Context, *plugin.Info) (*wire.Status, error) {
		return nil, &plugin.StatusError{Message: sdkMessage, Reason: "Unauthorized", Code: 401}
	})
	return 0 // Main exits
}

// TestPluginStatusError (issue 28, kubernetes/kubernetes#139150): a plugin that exits
// non-zero with a metav1.Status on stdout has its message in the error, in place of the
// stderr tail; any other stdout leaves the error as it was, and quotes none of it.
func TestPluginStatusError(t *testing.T) {
	t.Parallel()
	const failure = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"token expired: run aws sso login","reason":"Unauthorized","code":401}`
	tests := []struct {
		name  string
		fake  func(*exectest.Plugin)
		want  *Failure // nil: not a *StatusError
		wantf string   // %s is the command
	}{
		{"written by the SDK", func(p *exectest.Plugin) { p.Behaviour("sdk-status") },
			&Failure{Message: sdkMessage, Reason: "Unauthorized", Code: 401}, `execcred: plugin "%s" exited with code 1: ` + sdkMessage},
		{"written by hand, with stderr", func(p *exectest.Plugin) { p.Stdout("\n" + failure + "\n").Stderr("debug: no session\n").Exit(3) },
			&Failure{Message: "token expired: run aws sso login", Reason: "Unauthorized", Code: 401}, `execcred: plugin "%s" exited with code 3: token expired: run aws sso login`},
		{"not a status", func(p *exectest.Plugin) { p.Stdout(`token expired`).Stderr("no session\n").Exit(3) },
			nil, `execcred: plugin "%s" exited with code 3: no session`},
		{"a credential, then failed", func(p *exectest.Plugin) { p.Stdout(tokenOutput(V1, "secret-tok", time.Time{})).Exit(3) },
			nil, `execcred: plugin "%s" exited with code 3`},
		{"a status without a message", func(p *exectest.Plugin) { p.Stdout(`{"kind":"Status","reason":"Unauthorized"}`).Exit(3) },
			nil, `execcred: plugin "%s" exited with code 3`},
		{"a status, then more", func(p *exectest.Plugin) { p.Stdout(failure + `{"token":"secret-tok"}`).Exit(3) },
			nil, `execcred: plugin "%s" exited with code 3`},
		{"a status of more than 1 MiB", func(p *exectest.Plugin) {
			p.Stdout(`{"kind":"Status","message":"` + strings.Repeat("m", wire.MaxFailureSize) + `"}`).Exit(3)
		}, nil, `execcred: plugin "%s" exited with code 3`},
		{"a status, and exit 0", func(p *exectest.Plugin) { p.Stdout(failure) },
			nil, `execcred: plugin "%s": decoding stdout: json: cannot unmarshal string into Go struct field .status of type wire.Status`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := exectest.New(t)
			tt.fake(f)
			_, err := newSource(t, fakeConfig(f, V1), Options{}).Credential(t.Context(), nil)
			if want := strings.ReplaceAll(tt.wantf, "%s", f.Path()); err == nil || err.Error() != want {
				t.Fatalf("\n got %v\nwant %s", err, want)
			}
			var se *StatusError
			if got := errors.As(err, &se); got != (tt.want != nil) {
				t.Fatalf("a *StatusError: %v, want %v", got, tt.want != nil)
			}
			if tt.want == nil {
				return
			}
			var exit *execplugin.ExitError
			if se.Failure != *tt.want || !errors.As(err, &exit) || exit != se.Exit {
				t.Errorf("StatusError %+v, want %+v and the exit error", se, tt.want)
			}
		})
	}
}
