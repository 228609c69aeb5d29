//go:build unix

package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/testkit/exectest"
)

type icFixture struct {
	t      *testing.T
	dir    string
	config string
	fakes  map[string]*exectest.Plugin
}

// newICFixture installs a fake plugin as each of names and writes a config with the
// given providers (YAML list items, see icProvider).
func newICFixture(t *testing.T, names []string, providers string) *icFixture {
	t.Helper()
	f := &icFixture{t: t, dir: t.TempDir(), fakes: map[string]*exectest.Plugin{}}
	for _, n := range names {
		fake := exectest.New(t)
		if err := os.Symlink(fake.Path(), filepath.Join(f.dir, n)); err != nil {
			t.Fatal(err)
		}
		var env []string
		for _, e := range fake.Env() {
			k, v, _ := strings.Cut(e, "=")
			env = append(env, fmt.Sprintf("{name: %s, value: %q}", k, v))
		}
		providers = strings.ReplaceAll(providers, "{{env "+n+"}}", "["+strings.Join(env, ", ")+"]")
		f.fakes[n] = fake
	}
	f.config = filepath.Join(f.dir, "config.yaml")
	cfg := "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n" + providers
	if err := os.WriteFile(f.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// icProvider is a provider run by the fake plugin installed as name.
func icProvider(name, match string) string {
	return fmt.Sprintf(`- name: %[1]s
  matchImages: [%[2]q]
  defaultCacheDuration: 1h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env: {{env %[1]s}}
`, name, match)
}

// respond makes plugin name answer auth with cacheKeyType Registry.
func (f *icFixture) respond(name, auth string) {
	f.fakes[name].Stdout(`{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","auth":` + auth + `}`)
}

func (f *icFixture) execs(name string) int { return f.fakes[name].Runs() }

func TestImageCredentialGet(t *testing.T) {
	f := newICFixture(t, []string{"one", "two"}, icProvider("one", "*.registry.io")+icProvider("two", "*.registry.io"))
	f.respond("one", `{"a.registry.io":{"username":"one","password":"p1"}}`)
	f.respond("two", `{"a.registry.io/team":{"username":"two","password":"p2"},"a.registry.io":{"username":"two-host","password":"p3"}}`)
	code, out, errOut := runIn(t, "", "image-credential", "get", "a.registry.io/team/app:v1", "--config", f.config, "--bin-dir", f.dir)
	want := `{"auths":{"a.registry.io/team":{"username":"two","password":"p2","auth":"dHdvOnAy"},"a.registry.io":{"username":"one","password":"p1","auth":"b25lOnAx"}}}` + "\n"
	if code != ExitOK || out != want {
		t.Errorf("code %d\nstdout %s\nwant   %s\nstderr %s", code, out, want, errOut)
	}
	code, out, errOut = runIn(t, "", "image-credential", "get", "other.io/app", "--config", f.config, "--bin-dir", f.dir)
	if code != ExitOK || out != `{"auths":{}}`+"\n" || !strings.Contains(errOut, "no provider returned credentials") {
		t.Errorf("unmatched image: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestImageCredentialGetFailures(t *testing.T) {
	f := newICFixture(t, []string{"broken"}, icProvider("broken", "registry.io"))
	f.fakes["broken"].Exit(3).Stderr("no credentials for you")
	code, out, errOut := runIn(t, "", "image-credential", "get", "registry.io/app", "--config", f.config, "--bin-dir", f.dir)
	path := filepath.Join(f.dir, "broken")
	// Issue 32 item 9: the plugin's stderr is shown as it writes it, once, not again in
	// the error.
	want := fmt.Sprintf("Error: imagecred: provider \"broken\" (%s) for image \"registry.io/app\": plugin %q exited with code 3 (its stderr is above)\n", path, path)
	if code != ExitFailure || out != "" || errOut != "no credentials for you"+want {
		t.Errorf("code %d, stdout %q\nstderr %q\nwant   %q", code, out, errOut, "no credentials for you"+want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"registry.io/app", "--config", f.config, "--bin-dir", f.dir, "--pod", "nopod"}, "Error: invalid --pod \"nopod\": want NAMESPACE/NAME\n"},
		{[]string{"registry.io/app", "--config", f.config}, "Error: required flag(s) --bin-dir not set\n"},
		{[]string{"registry.io/app", "--config", filepath.Join(f.dir, "none.yaml"), "--bin-dir", f.dir}, "Error: credential provider config " + filepath.Join(f.dir, "none.yaml") + ": unable to access path"},
	} {
		code, _, errOut := runIn(t, "", append([]string{"image-credential", "get"}, tc.args...)...)
		if code != ExitUsage || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("get %v: code %d, stderr %q, want prefix %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestImageCredentialBinaries covers issue 32 item 9: a provider binary that cannot run
// is reported in the words kplug credential uses, by get and by validate --bin-dir, which
// checks every provider's binary as the kubelet will.
func TestImageCredentialBinaries(t *testing.T) {
	plain := func(name string) string { // a provider with no fake plugin installed
		return strings.Replace(icProvider(name, name+".io"), "  env: {{env "+name+"}}\n", "", 1)
	}
	f := newICFixture(t, []string{"good"}, icProvider("good", "good.io")+plain("noexec")+plain("adir")+plain("gone"))
	writeFile(t, filepath.Join(f.dir, "noexec"), "#!/bin/sh\n")
	if err := os.Mkdir(filepath.Join(f.dir, "adir"), 0o700); err != nil {
		t.Fatal(err)
	}
	noexec := fmt.Sprintf(`imagecred: provider "noexec": plugin %q cannot be executed: permission denied (the file is not marked executable)`, filepath.Join(f.dir, "noexec"))
	code, out, errOut := runIn(t, "", "image-credential", "validate", "--config", f.config, "--bin-dir", f.dir)
	want := "Error: " + noexec + "\n" +
		fmt.Sprintf(`imagecred: provider "adir": plugin %q cannot be executed: is a directory`, filepath.Join(f.dir, "adir")) + "\n" +
		`imagecred: provider "gone": plugin binary executable ` + filepath.Join(f.dir, "gone") + " did not exist\n"
	if code != ExitUsage || out != "" || errOut != want {
		t.Errorf("validate --bin-dir: code %d, stdout %q\nstderr %q\nwant   %q", code, out, errOut, want)
	}
	code, out, errOut = runIn(t, "", "image-credential", "get", "noexec.io/app", "--config", f.config, "--bin-dir", f.dir)
	if code != ExitFailure || out != "" || errOut != "Error: "+noexec+"\n" {
		t.Errorf("get: code %d, stdout %q\nstderr %q\nwant   %q", code, out, errOut, "Error: "+noexec+"\n")
	}
	// Without --bin-dir, validate checks the config only, as before.
	code, out, _ = runIn(t, "", "image-credential", "validate", "--config", f.config)
	if code != ExitOK || !strings.HasPrefix(out, "valid (4 providers, config hash sha256:") || !strings.HasSuffix(out, ")\n") || strings.Contains(out, "binaries") {
		t.Errorf("validate: code %d, stdout %q", code, out)
	}
	good := newICFixture(t, []string{"good"}, icProvider("good", "good.io"))
	code, out, errOut = runIn(t, "", "image-credential", "validate", "--config", good.config, "--bin-dir", good.dir)
	if want := ", their binaries in " + good.dir + " checked)\n"; code != ExitOK || !strings.HasPrefix(out, "valid (1 providers, config hash sha256:") || !strings.HasSuffix(out, want) || errOut != "" {
		t.Errorf("validate --bin-dir, good: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = runIn(t, "", "image-credential", "validate", "--config", good.config, "--bin-dir", filepath.Join(good.dir, "nope"))
	if want := "Error: imagecred: plugin binary directory " + filepath.Join(good.dir, "nope") + " did not exist\n"; code != ExitUsage || errOut != want {
		t.Errorf("validate --bin-dir missing: code %d\nstderr %q\nwant   %q", code, errOut, want)
	}
}

func TestImageCredentialValidate(t *testing.T) {
	valid := newICFixture(t, []string{"one"}, icProvider("one", "registry.io"))
	code, out, errOut := runIn(t, "", "image-credential", "validate", "--config", valid.config)
	if code != ExitOK || !strings.HasPrefix(out, "valid (1 providers, config hash sha256:") || errOut != "" {
		t.Errorf("valid config: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	hash := strings.TrimSuffix(strings.TrimPrefix(out, "valid (1 providers, config hash "), ")\n")
	two := newICFixture(t, []string{"one", "two"}, icProvider("one", "registry.io")+icProvider("two", "other.io"))
	code, out, _ = runIn(t, "", "image-credential", "validate", "--config", valid.config, "-o", "json")
	if want := "{\n  \"providers\": [\n    \"one\"\n  ],\n  \"hash\": \"" + hash + "\"\n}\n"; code != ExitOK || out != want {
		t.Errorf("-o json: code %d\n%s\nwant\n%s", code, out, want)
	}
	code, out, _ = runIn(t, "", "image-credential", "validate", "--config", two.config, "-o", "yaml")
	if want := "hash: sha256:"; code != ExitOK || !strings.HasPrefix(out, want) || !strings.HasSuffix(out, "\nproviders:\n- one\n- two\n") {
		t.Errorf("-o yaml: code %d\n%s", code, out)
	}
	invalid := newICFixture(t, nil, `- name: "a b"
  matchImages: []
  apiVersion: credentialprovider.kubelet.k8s.io/v1beta1
  defaultCacheDuration: -1m
`)
	code, out, errOut = runIn(t, "", "image-credential", "validate", "--config", invalid.config)
	want := "Error: credential provider config " + invalid.config + " is invalid (3 errors):\n" +
		"  providers.name: Invalid value: \"a b\": provider name cannot contain spaces\n" +
		"  providers.matchImages: Required value: at least 1 item in matchImages is required\n" +
		"  providers.defaultCacheDuration: Invalid value: \"-1m0s\": must be greater than or equal to 0\n"
	if code != ExitUsage || out != "" || errOut != want {
		t.Errorf("invalid config: code %d, stdout %q\nstderr %q\nwant   %q", code, out, errOut, want)
	}
}

func TestDockerHelperGet(t *testing.T) {
	f := newICFixture(t, []string{"hub", "reg"}, icProvider("hub", "docker.io")+icProvider("reg", "registry.io:5000"))
	f.respond("hub", `{"https://index.docker.io/v1/":{"username":"hub","password":"h"}}`)
	f.respond("reg", `{"registry.io:5000":{"username":"reg","password":"r"}}`)
	cache := filepath.Join(f.dir, "cache")
	args := []string{"image-credential", "docker-helper", "get", "--config", f.config, "--bin-dir", f.dir, "--cache-dir", cache}
	for _, tc := range []struct{ in, want string }{
		{"https://index.docker.io/v1/\n", `{"ServerURL":"https://index.docker.io/v1/","Username":"hub","Secret":"h"}` + "\n"},
		{"registry.io:5000", `{"ServerURL":"registry.io:5000","Username":"reg","Secret":"r"}` + "\n"},
		{"registry.io:5000\n", `{"ServerURL":"registry.io:5000","Username":"reg","Secret":"r"}` + "\n"},
	} {
		code, out, errOut := runIn(t, tc.in, args...)
		if code != ExitOK || out != tc.want {
			t.Errorf("get %q: code %d, stdout %q, want %q; stderr %q", tc.in, code, out, tc.want, errOut)
		}
	}
	// The third run was answered from the on-disk cache: reg ran once.
	if n := f.execs("reg"); n != 1 {
		t.Errorf("plugin reg ran %d times over two helper runs with a cache, want 1", n)
	}
	code, out, _ := runIn(t, "quay.io\n", args...)
	if code != ExitFailure || out != "credentials not found in native keychain\n" {
		t.Errorf("unknown registry: code %d, stdout %q", code, out)
	}

	// list names what the cache holds: what get answers without a plugin run.
	code, out, errOut := runIn(t, "", "image-credential", "docker-helper", "list", "--cache-dir", cache)
	if want := `{"https://index.docker.io/v1/":"hub","registry.io:5000":"reg"}` + "\n"; code != ExitOK || out != want {
		t.Errorf("list: code %d, stdout %q, want %q; stderr %q", code, out, want, errOut)
	}
	code, out, _ = runIn(t, "", "image-credential", "docker-helper", "list")
	if code != ExitOK || out != "{}\n" {
		t.Errorf("list without a cache: code %d, stdout %q", code, out)
	}
}

func TestDockerHelperReadOnly(t *testing.T) {
	for _, action := range []string{"store", "erase"} {
		code, out, errOut := runIn(t, `{"ServerURL":"registry.io","Username":"u","Secret":"s3cret"}`, "image-credential", "docker-helper", action)
		msg := `"` + action + `" is not supported: this credential helper is read-only: its credentials come from kubelet credential provider plugins`
		if code != ExitFailure || out != msg+"\n" || errOut != "Error: "+msg+"\n" {
			t.Errorf("%s: code %d, stdout %q, stderr %q; want exit 1 and %q", action, code, out, errOut, msg)
		}
	}
	code, out, _ := runIn(t, "", "image-credential", "docker-helper", "version")
	if code != ExitOK || !strings.HasPrefix(out, "kplug image-credential docker-helper (github.com/kplug/kplug) ") {
		t.Errorf("version: code %d, stdout %q", code, out)
	}
}

func TestTokenExchangePluginCommand(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("subject_token") != "sa-token" || r.FormValue("audience") != "reg" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		_, _ = w.Write([]byte(`{"access_token":"at","token_type":"Bearer","expires_in":100}`))
	}))
	defer srv.Close()
	req := `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"registry.io/app","serviceAccountToken":"sa-token"}`
	code, out, errOut := runIn(t, req, "image-credential", "plugin", "token-exchange", "--endpoint", srv.URL, "--audience", "reg", "--username", "robot")
	want := `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"1m30s","auth":{"registry.io":{"username":"robot","password":"at"}}}` + "\n"
	if code != ExitOK || out != want {
		t.Errorf("code %d\nstdout %s\nwant   %s\nstderr %s", code, out, want, errOut)
	}
	code, _, errOut = runIn(t, req, "image-credential", "plugin", "token-exchange", "--endpoint", srv.URL, "--cache-key-type", "registry")
	if code != ExitUsage || !strings.HasPrefix(errOut, `Error: invalid --cache-key-type "registry"`) {
		t.Errorf("bad --cache-key-type: code %d, stderr %q", code, errOut)
	}
	code, out, errOut = runIn(t, req, "image-credential", "plugin", "token-exchange", "--endpoint", "http://sts.example/token")
	if want := "Error: token-exchange: endpoint \"http://sts.example/token\" is not an https URL"; code != ExitUsage || out != "" || !strings.HasPrefix(errOut, want) {
		t.Errorf("http endpoint: code %d, stdout %q, stderr %q; want exit %d and %s...", code, out, errOut, ExitUsage, want)
	}
}

// Regression test for kubernetes/kubernetes#132951 (1.33 looked up credentials for images
// already present, so a plugin that could not reach its cloud failed pods that needed
// nothing from the registry): told the pull policy and that the image is present, get asks
// no provider, as the kubelet 1.34+ decides.
func TestImageCredentialGetPullDecision(t *testing.T) {
	f := newICFixture(t, []string{"acr"}, icProvider("acr", "*.azurecr.io"))
	f.fakes["acr"].Exit(1).Stderr("failed to receive challenge: dial tcp: i/o timeout")
	args := func(extra ...string) []string {
		return append([]string{"image-credential", "get", "team.azurecr.io/cilium/cilium:v1", "--config", f.config, "--bin-dir", f.dir}, extra...)
	}
	for _, tc := range []struct {
		extra []string
		code  int
		out   string
		runs  int // plugin runs so far
	}{
		{[]string{"--pull-policy", "IfNotPresent", "--image-present"}, ExitOK, `{"auths":{}}` + "\n", 0},
		{[]string{"--pull-policy", "Never", "--image-present"}, ExitOK, `{"auths":{}}` + "\n", 0},
		{[]string{"--pull-policy", "Never"}, ExitFailure, "", 0},
		{nil, ExitFailure, "", 1}, // no decision inputs: look up, as before
		{[]string{"--pull-policy", "IfNotPresent"}, ExitFailure, "", 2},
		{[]string{"--pull-policy", "Always", "--image-present"}, ExitFailure, "", 3},
		{[]string{"--pull-policy", "IfNotPresent", "--image-present", "--verify-access"}, ExitFailure, "", 4},
	} {
		code, out, errOut := runIn(t, "", args(tc.extra...)...)
		if code != tc.code || out != tc.out || f.execs("acr") != tc.runs {
			t.Errorf("%v: code %d, stdout %q, %d plugin runs; want %d, %q, %d\nstderr %s", tc.extra, code, out, f.execs("acr"), tc.code, tc.out, tc.runs, errOut)
		}
	}
	code, _, errOut := runIn(t, "", args("--pull-policy", "Never")...)
	if want := "Error: container image \"team.azurecr.io/cilium/cilium:v1\": image is not present with pull policy of Never\n"; code != ExitFailure || errOut != want {
		t.Errorf("Never, absent: code %d, stderr %q, want %q", code, errOut, want)
	}
	for _, bad := range [][]string{{"--pull-policy", "Sometimes"}, {"--image-present"}, {"--verify-access"}} {
		if code, out, errOut := runIn(t, "", args(bad...)...); code != ExitUsage || out != "" || f.execs("acr") != 4 {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want a usage error and no plugin run", bad, code, out, errOut)
		}
	}
}
