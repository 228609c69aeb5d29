//go:build unix

package bench

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/plugin/pkg/client/auth/exec"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/kuberc"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

// okTransport answers every request with 200, so that only the credential can fail.
type okTransport struct{}

func (okTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("{}"))}, nil
}

// viaAuthenticator makes one request through client-go's exec authenticator: its error
// is what a client-go program (kubectl) reports.
func viaAuthenticator(t *testing.T, ec *clientcmdapi.ExecConfig) (constructErr, requestErr error) {
	t.Helper()
	a, err := exec.GetAuthenticator(ec, nil)
	if err != nil {
		return err, nil
	}
	tc := &transport.Config{}
	if err := a.UpdateTransportConfig(tc); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://k.example/api", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tc.WrapTransport(okTransport{}).RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return nil, err
}

// viaKplug asks kplug's runtime for a credential with the same exec config.
func viaKplug(t *testing.T, ec *clientcmdapi.ExecConfig) (constructErr, requestErr error) {
	t.Helper()
	cfg, err := execcred.FromRESTConfig(&rest.Config{Host: "https://k.example", ExecProvider: ec})
	if err != nil {
		return err, nil
	}
	p, err := execcred.NewPlugin(*cfg, execcred.PluginOptions{})
	if err != nil {
		return err, nil
	}
	_, err = p.Credential(t.Context(), nil)
	return nil, err
}

// TestPluginPolicyMatchesClientGo uses client-go's exec authenticator as the oracle: the
// same exec configs under the same policies go through it and through kplug's runtime,
// and must be refused at construction with the same message, or denied before a run with
// the same message, or allowed; the plugin runs exactly when it is allowed.
func TestPluginPolicyMatchesClientGo(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// bin/fakeplug is the plugin in PATH; other/fakeplug a plugin of the same name
	// elsewhere; link/fakeplug a symbolic link to bin/fakeplug.
	dir := t.TempDir()
	bin, other, link := filepath.Join(dir, "bin"), filepath.Join(dir, "other"), filepath.Join(dir, "link")
	for _, d := range []string{bin, other, link} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	plug := filepath.Join(bin, "fakeplug")
	for target, name := range map[string]string{exe: plug, filepath.Join(other, "fakeplug"): "", plug: filepath.Join(link, "fakeplug")} {
		if name == "" {
			target, name = exe, target
		}
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)

	allowlist := func(cmds ...string) clientcmdapi.PluginPolicy {
		p := clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PluginPolicyAllowlist, Allowlist: []clientcmdapi.AllowlistEntry{}}
		for _, c := range cmds {
			p.Allowlist = append(p.Allowlist, clientcmdapi.AllowlistEntry{Command: c})
		}
		return p
	}
	tests := []struct {
		name    string
		command string
		policy  clientcmdapi.PluginPolicy
		allowed bool
	}{
		{"no policy", plug, clientcmdapi.PluginPolicy{}, true},
		{"AllowAll", plug, clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PluginPolicyAllowAll}, true},
		{"DenyAll", plug, clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PluginPolicyDenyAll}, false},
		{"DenyAll, a name in PATH", "fakeplug", clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PluginPolicyDenyAll}, false},
		{"absolute path listed", plug, allowlist(plug), true},
		{"name listed", "fakeplug", allowlist("fakeplug"), true},
		{"name, its path listed", "fakeplug", allowlist(plug), true},
		{"path, its name listed", plug, allowlist("fakeplug"), true},
		{"listed among others", plug, allowlist("kubelogin", filepath.Join(other, "kubelogin"), "/nonexistent/fakeplug", "fakeplug"), true},
		{"unclean command, clean entry", filepath.Join(dir, "bin") + "//./fakeplug", allowlist(plug), true},
		{"same name elsewhere", filepath.Join(other, "fakeplug"), allowlist("fakeplug"), false},
		{"same name elsewhere, by path", filepath.Join(other, "fakeplug"), allowlist(plug), false},
		{"a link to a listed path", filepath.Join(link, "fakeplug"), allowlist(plug), false},
		{"the target of a listed link", plug, allowlist(filepath.Join(link, "fakeplug")), false},
		{"another plugin listed", plug, allowlist("kubelogin"), false},
		{"listed entry does not exist", plug, allowlist("/nonexistent/fakeplug"), false},
		{"name not in PATH", "nosuchplug", allowlist("fakeplug"), false},
		{"path that does not exist", filepath.Join(dir, "missing", "fakeplug"), allowlist("fakeplug"), false},
		{"a directory", bin, allowlist("fakeplug"), false},
		// Refused when the authenticator is built.
		{"Allowlist without a list", plug, clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PluginPolicyAllowlist}, false},
		{"empty Allowlist", plug, allowlist(), false},
		{"DenyAll with a list", plug, clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PluginPolicyDenyAll, Allowlist: []clientcmdapi.AllowlistEntry{}}, false},
		{"no policy with a list", plug, clientcmdapi.PluginPolicy{Allowlist: []clientcmdapi.AllowlistEntry{{Command: plug}}}, false},
		{"unknown policy", plug, clientcmdapi.PluginPolicy{PolicyType: "Sometimes"}, false},
		{"empty entry", plug, allowlist(plug, ""), false},
		{"unclean entry", plug, allowlist("./fakeplug"), false},
		{"entry with a trailing slash", plug, allowlist(bin + "/"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := exectest.New(t).Stdout(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t"}}`)
			ec := &clientcmdapi.ExecConfig{
				APIVersion:      "client.authentication.k8s.io/v1",
				Command:         tt.command,
				InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
				PluginPolicy:    tt.policy,
			}
			for _, kv := range fake.Env() {
				name, value, _ := strings.Cut(kv, "=")
				ec.Env = append(ec.Env, clientcmdapi.ExecEnvVar{Name: name, Value: value})
			}

			wantConstruct, wantErr := viaAuthenticator(t, ec)
			wantRuns := fake.Runs()
			gotConstruct, gotErr := viaKplug(t, ec)
			gotRuns := fake.Runs() - wantRuns

			// kplug says client-go's words, then, for a list left beside another policy
			// (kubernetes/kubernetes#142564), what to do about it (InvalidPolicyError.Hint).
			gotMsg := msg(gotConstruct)
			var invalid *kuberc.InvalidPolicyError
			if errors.As(gotConstruct, &invalid) && invalid.Hint != "" {
				gotMsg = strings.TrimSuffix(gotMsg, "; "+invalid.Hint)
			} else if strings.HasSuffix(tt.name, "with a list") {
				t.Errorf("no advice about the list left over: %v", gotConstruct)
			}
			if gotMsg != msg(wantConstruct) {
				t.Fatalf("refused at construction:\nclient-go: %v\nkplug:     %v", wantConstruct, gotConstruct)
			}
			if wantConstruct != nil {
				if wantRuns+gotRuns != 0 {
					t.Errorf("the plugin ran %d times", wantRuns+gotRuns)
				}
				return
			}
			want := strings.TrimPrefix(msg(wantErr), "getting credentials: ")
			got := strings.TrimPrefix(msg(gotErr), "execcred: ")
			if tt.allowed {
				if wantErr != nil || gotErr != nil || wantRuns != 1 || gotRuns != 1 {
					t.Fatalf("allowed: client-go %v (%d runs), kplug %v (%d runs)", wantErr, wantRuns, gotErr, gotRuns)
				}
				return
			}
			if wantErr == nil || got != want {
				t.Fatalf("denied:\nclient-go: %v\nkplug:     %v", wantErr, gotErr)
			}
			if wantRuns != 0 || gotRuns != 0 {
				t.Errorf("a denied plugin ran: client-go %d, kplug %d times", wantRuns, gotRuns)
			}
		})
	}
}
