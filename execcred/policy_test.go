package execcred

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred/kuberc"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

const policyMetricHeader = `
# HELP rest_client_exec_plugin_policy_call_total Number of comparisons of an exec plugin to the plugin policy and allowlist (if any), partitioned by whether or not the policy permits the plugin
# TYPE rest_client_exec_plugin_policy_call_total counter
`

func allowlist(cmds ...string) kuberc.Policy {
	p := kuberc.Policy{Type: kuberc.Allowlist, Allowlist: []kuberc.AllowlistEntry{}}
	for _, c := range cmds {
		p.Allowlist = append(p.Allowlist, kuberc.AllowlistEntry{Command: c})
	}
	return p
}

// A plugin the policy denies is never started; the error is client-go's, and the policy
// metric (which client-go declares but never exports) counts each decision.
func TestPolicyDeniesBeforeTheRun(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	f := exectest.New(t).Stdout(tokenOutput(V1, "t", time.Time{}))
	for _, tt := range []struct {
		policy  kuberc.Policy
		wantErr string
	}{
		{kuberc.Policy{Type: kuberc.DenyAll}, `execcred: plugin "` + f.Path() + `" not allowed: policy set to "DenyAll"`},
		{allowlist("kubelogin", "/nonexistent/"+filepath.Base(f.Path())), `execcred: plugin path "` + f.Path() + `" is not permitted by the credential plugin allowlist`},
		{allowlist(f.Path()), ""},
		{kuberc.Policy{}, ""},
	} {
		cfg := fakeConfig(f, V1)
		cfg.Policy = tt.policy
		_, err := newSource(t, cfg, Options{Metrics: m}).Credential(t.Context(), nil)
		var denied *kuberc.DeniedError
		var pe *PluginError
		switch {
		case tt.wantErr == "" && err != nil:
			t.Fatalf("%v: %v", tt.policy, err)
		case tt.wantErr != "" && (msg(err) != tt.wantErr || !errors.As(err, &denied) || !errors.As(err, &pe)):
			t.Fatalf("%v: %v\nwant %s", tt.policy, err, tt.wantErr)
		}
	}
	if n := f.Runs(); n != 2 {
		t.Errorf("the plugin ran %d times, want 2 (only where allowed)", n)
	}
	want := policyMetricHeader + `rest_client_exec_plugin_policy_call_total{status="allowed"} 2
rest_client_exec_plugin_policy_call_total{status="denied"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "rest_client_exec_plugin_policy_call_total"); err != nil {
		t.Error(err)
	}
	// Only attempted runs are calls, as in client-go.
	if got := testutil.ToFloat64(m.calls.WithLabelValues("0", "no_error")); got != 2 {
		t.Errorf("rest_client_exec_plugin_call_total{0,no_error} = %v, want 2", got)
	}
}

// The policy is applied before every run, with the PATH of that moment: an allowlisted
// name that no longer resolves to the same file is denied on the next run.
func TestPolicyCheckedOnEveryRun(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("links")
	}
	f := exectest.New(t).Stdout(tokenOutput(V1, "t", time.Time{}))
	bin, other := filepath.Join(t.TempDir(), "bin"), filepath.Join(t.TempDir(), "other")
	for _, d := range []string{bin, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(f.Path(), filepath.Join(d, "fakeplug")); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	cfg := fakeConfig(f, V1)
	cfg.Command, cfg.Policy = filepath.Join(bin, "fakeplug"), allowlist("fakeplug")
	p, err := NewPlugin(cfg, quietHost())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Credential(t.Context(), nil); err != nil {
		t.Fatalf("first run: %v", err)
	}
	t.Setenv("PATH", other) // "fakeplug" is now another file
	_, err = p.Credential(t.Context(), nil)
	var denied *kuberc.DeniedError
	if !errors.As(err, &denied) || denied.Policy != kuberc.Allowlist {
		t.Fatalf("second run: %v, want a denial", err)
	}
	if n := f.Runs(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

// A relative command is checked where it runs: against the config's BaseDir.
func TestPolicyRelativeCommandUnderBaseDir(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("links")
	}
	f := exectest.New(t).Stdout(tokenOutput(V1, "t", time.Time{}))
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	plug := filepath.Join(base, "bin", "fakeplug")
	if err := os.Symlink(f.Path(), plug); err != nil {
		t.Fatal(err)
	}
	cfg := fakeConfig(f, V1)
	cfg.Command, cfg.BaseDir = filepath.Join("bin", "fakeplug"), base
	for policy, want := range map[string]string{
		plug:                "",
		"bin/fakeplug":      `execcred: plugin path "` + plug + `" is not permitted by the credential plugin allowlist`,
		"/other/fakeplug":   `execcred: plugin path "` + plug + `" is not permitted by the credential plugin allowlist`,
		filepath.Dir(plug):  `execcred: plugin path "` + plug + `" is not permitted by the credential plugin allowlist`,
		filepath.Base(plug): `execcred: plugin path "` + plug + `" is not permitted by the credential plugin allowlist`,
	} {
		cfg.Policy = allowlist(policy)
		p, err := NewPlugin(cfg, quietHost())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Credential(t.Context(), nil); msg(err) != want {
			t.Errorf("allowlist %q: %v, want %q", policy, err, want)
		}
	}
	if n := f.Runs(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

// An invalid policy is a configuration error with client-go's message.
func TestNewPluginValidatesThePolicy(t *testing.T) {
	t.Parallel()
	cfg := Config{Command: "p", APIVersion: V1, InteractiveMode: Never, Policy: allowlist()}
	_, err := NewPlugin(cfg, PluginOptions{})
	var ce *ConfigError
	var invalid *kuberc.InvalidPolicyError
	want := `invalid plugin policy: credential plugin policy set to "Allowlist", but allowlist is empty; use "DenyAll" policy instead`
	if !errors.As(err, &ce) || !errors.As(err, &invalid) || err.Error() != want {
		t.Fatalf("NewPlugin: %v\nwant %s", err, want)
	}
}

// The policy travels on rest.Config as kubectl puts it there, nil and empty lists kept
// apart (validation tells them apart).
func TestPolicyThroughRESTConfig(t *testing.T) {
	t.Parallel()
	for _, p := range []kuberc.Policy{{}, {Type: kuberc.DenyAll}, allowlist("kplug", "/usr/bin/x"), allowlist(), {Type: kuberc.Allowlist}} {
		cfg := &rest.Config{Host: "https://k.example", ExecProvider: &clientcmdapi.ExecConfig{Command: "p", APIVersion: V1, InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}
		SetPolicy(cfg, p)
		c, err := fromRESTConfig(cfg)
		if p.Validate() == nil && err != nil || c == nil {
			t.Fatalf("%v: %v", p, err)
		}
		if diff := cmp.Diff(p, c.Policy); diff != "" {
			t.Errorf("policy (-set +read):\n%s", diff)
		}
	}
	SetPolicy(&rest.Config{}, kuberc.Policy{Type: kuberc.DenyAll}) // no exec provider: nothing to do
}

func msg(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
