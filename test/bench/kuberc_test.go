//go:build unix

package bench

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/plugin/pkg/client/auth/exec"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubectlkuberc "k8s.io/kubectl/pkg/kuberc"

	"github.com/kplug/kplug/execcred/kuberc"
)

// kubercFiles are the package's fixtures, each a case kubectl decides in its own way.
func kubercFiles(t testing.TB) []string {
	files, err := filepath.Glob("../../execcred/kuberc/testdata/*.yaml")
	if err != nil || len(files) < 30 {
		t.Fatalf("kuberc fixtures: %v, %d files", err, len(files))
	}
	return files
}

// TestKubercMatchesKubectl uses kubectl's own kuberc package as the oracle: each fixture,
// named explicitly and as the default file, is read by kubectl (DefaultGetPreferences, then
// its conversion to client-go's policy and ValidatePluginPolicy, as kubectl's Apply does)
// and by kuberc.Load, and both must agree on whether the file is an error, on the policy,
// on the validation error's text, and on whether there is something to warn about.
func TestKubercMatchesKubectl(t *testing.T) {
	for _, f := range kubercFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			compareWithKubectl(t, data)
		})
	}
}

// FuzzKubercAgainstKubectl compares any file's decoding with kubectl's.
func FuzzKubercAgainstKubectl(f *testing.F) {
	for _, file := range kubercFiles(f) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(compareWithKubectl)
}

// kubectlPolicy is kubectl's conversion of a Preference to client-go's policy
// (Preferences.convertPluginPolicy, which is not exported).
func kubectlPolicy(dir string, explicit bool, errOut *bytes.Buffer) (*clientcmdapi.PluginPolicy, error) {
	path := ""
	if explicit {
		path = kuberc.DefaultPath(dir)
	}
	pref, err := kubectlkuberc.DefaultGetPreferences(path, errOut)
	if err != nil || pref == nil {
		return nil, err
	}
	p := &clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PolicyType(pref.CredentialPluginPolicy)}
	if pref.CredentialPluginAllowlist != nil {
		p.Allowlist = []clientcmdapi.AllowlistEntry{}
		for _, e := range pref.CredentialPluginAllowlist {
			p.Allowlist = append(p.Allowlist, clientcmdapi.AllowlistEntry{Command: e.Command})
		}
	}
	return p, nil
}

func compareWithKubectl(t *testing.T, data []byte) {
	home := t.TempDir()
	path := kuberc.DefaultPath(home)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERC", "")
	saved := kubectlkuberc.RecommendedKubeRCFile
	kubectlkuberc.RecommendedKubeRCFile = path
	t.Cleanup(func() { kubectlkuberc.RecommendedKubeRCFile = saved })

	for _, explicit := range []bool{true, false} {
		var errOut bytes.Buffer
		want, wantErr := kubectlPolicy(home, explicit, &errOut)
		o := kuberc.Options{Home: home}
		if explicit {
			o.Path = path
		}
		got, gotErr := kuberc.Load(o)
		var invalid *kuberc.InvalidPolicyError
		if errors.As(gotErr, &invalid) {
			gotErr = nil // kubectl validates the policy after loading, below
		}
		if (wantErr != nil) != (gotErr != nil) {
			t.Fatalf("explicit=%v: kubectl: %v; kplug: %v\n%q", explicit, wantErr, gotErr, data)
		}
		if wantErr != nil {
			continue
		}
		if want == nil {
			want = &clientcmdapi.PluginPolicy{}
		}
		if diff := cmp.Diff(toClientGo(got.Policy()), *want); diff != "" {
			t.Fatalf("explicit=%v: policy (-kplug +kubectl):\n%s\n%q", explicit, diff, data)
		}
		wantValid := exec.ValidatePluginPolicy(*want)
		var gotValid error
		if invalid != nil {
			gotValid = invalid.Err
		}
		if msg(wantValid) != msg(gotValid) {
			t.Fatalf("explicit=%v: validation: kubectl %q, kplug %q", explicit, msg(wantValid), msg(gotValid))
		}
		if warned := len(got.Warnings) > 0; warned != (errOut.Len() > 0) {
			t.Fatalf("explicit=%v: kubectl warned %q; kplug %q\n%q", explicit, errOut.String(), got.Warnings, data)
		}
	}
}

func toClientGo(p kuberc.Policy) clientcmdapi.PluginPolicy {
	cp := clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PolicyType(p.Type)}
	if p.Allowlist != nil {
		cp.Allowlist = []clientcmdapi.AllowlistEntry{}
		for _, e := range p.Allowlist {
			cp.Allowlist = append(cp.Allowlist, clientcmdapi.AllowlistEntry{Command: e.Command})
		}
	}
	return cp
}

func msg(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
