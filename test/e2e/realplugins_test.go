package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/test/e2e/framework"
)

// Tests of exec credential plugins that nobody here wrote (aws-iam-authenticator, Azure
// kubelogin), built from their pinned releases by `make tools` (hack/tools/build.sh), run
// through kplug's runtime and `kplug exec-cache` beside client-go's exec authenticator.

// recordedPlugin is a real plugin behind a recorder: a shell script with the plugin's name
// that counts its runs and keeps what each printed, and passes the plugin's stdout, stderr
// and exit code through unchanged. Its environment, arguments and stdin are the plugin's.
type recordedPlugin struct {
	Path string // the recorder: the command to configure
	Bin  string // the plugin itself, in _output/bin
	dir  string
}

func newRecordedPlugin(t testing.TB, name string) *recordedPlugin {
	t.Helper()
	bin := framework.ToolForTest(t, name)
	dir := t.TempDir()
	if strings.Contains(dir+bin, "'") {
		t.Fatalf("cannot quote %s or %s for sh", dir, bin)
	}
	p := &recordedPlugin{Path: filepath.Join(dir, "bin", name), Bin: bin, dir: dir}
	for _, d := range []string{"bin", "out"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(`#!/bin/sh
printf x >>'%[1]s/runs'
out=$(mktemp '%[1]s/out/XXXXXX') || exit 97
'%[2]s' "$@" >"$out"
rc=$?
cat "$out"
exit $rc
`, dir, bin)
	if err := os.WriteFile(p.Path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// runs is how many times the plugin ran.
func (p *recordedPlugin) runs() int {
	b, _ := os.ReadFile(filepath.Join(p.dir, "runs"))
	return len(b)
}

// takeOutput returns what the one run since the last call printed, and fails the test if
// there was not exactly one.
func (p *recordedPlugin) takeOutput(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(p.dir, "out", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Fatalf("%d runs of %s since the last look, want 1", len(files), filepath.Base(p.Bin))
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(files[0]); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pluginOutput is the part of an ExecCredential these tests compare.
type pluginOutput struct {
	APIVersion string `json:"apiVersion"`
	Status     struct {
		Token               string     `json:"token"`
		ExpirationTimestamp *time.Time `json:"expirationTimestamp"`
	} `json:"status"`
}

func decodePluginOutput(t *testing.T, out string) pluginOutput {
	t.Helper()
	var o pluginOutput
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("the plugin printed something that is not JSON: %v\n%s", err, out)
	}
	return o
}

// credentialJSON is `kplug credential -o json --show-token`.
type credentialJSON struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Token      string     `json:"token"`
	Expiration *time.Time `json:"expirationTimestamp"`
}

// runEnv runs a command with exactly env as its environment.
func runEnv(t testing.TB, env []string, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// hostEnv is a small environment for clients: PATH, and HOME and XDG_CACHE_HOME in home (a
// directory of the test's own), so that nothing from the machine's ~/.aws, ~/.azure or
// ~/.kube reaches a plugin.
func hostEnv(home string, extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CACHE_HOME=" + filepath.Join(home, ".cache")}, extra...)
}

// execBlock is the exec section of a kubeconfig user.
type execBlock struct {
	apiVersion  string
	command     string
	args        []string
	env         [][2]string
	clusterInfo bool   // provideClusterInfo
	extension   string // the client.authentication.k8s.io/exec cluster extension (JSON)
}

// writeExecKubeconfig writes a kubeconfig with one context per user (named after it), all
// for one cluster at server; caPEM may be empty.
func writeExecKubeconfig(t testing.TB, path, server, caPEM string, users map[string]execBlock) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\n", server)
	if caPEM != "" {
		fmt.Fprintf(&b, "    certificate-authority-data: %s\n", b64(caPEM))
	}
	// One cluster per user when a user needs the exec extension, which is per cluster.
	for name, u := range users {
		if u.extension != "" {
			fmt.Fprintf(&b, "- name: c-%s\n  cluster:\n    server: %s\n", name, server)
			if caPEM != "" {
				fmt.Fprintf(&b, "    certificate-authority-data: %s\n", b64(caPEM))
			}
			fmt.Fprintf(&b, "    extensions:\n    - name: client.authentication.k8s.io/exec\n      extension: %s\n", u.extension)
		}
	}
	b.WriteString("contexts:\n")
	for name, u := range users {
		cluster := "c"
		if u.extension != "" {
			cluster = "c-" + name
		}
		fmt.Fprintf(&b, "- name: %s\n  context: {cluster: %s, user: %s}\n", name, cluster, name)
	}
	b.WriteString("users:\n")
	for name, u := range users {
		fmt.Fprintf(&b, "- name: %s\n  user:\n    exec:\n      apiVersion: %s\n      command: %q\n      interactiveMode: Never\n      provideClusterInfo: %t\n      args:\n", name, u.apiVersion, u.command, u.clusterInfo)
		for _, a := range u.args {
			fmt.Fprintf(&b, "      - %q\n", a)
		}
		b.WriteString("      env:\n")
		for _, e := range u.env {
			fmt.Fprintf(&b, "      - {name: %q, value: %q}\n", e[0], e[1])
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// bearerRecorder is a TLS server that records the Authorization header of each request.
type bearerRecorder struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newBearerRecorder(t testing.TB) *bearerRecorder {
	s := &bearerRecorder{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *bearerRecorder) last() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.auth) == 0 {
		return ""
	}
	return s.auth[len(s.auth)-1]
}

// parity is what client-go's exec authenticator and kplug's runtime (the execcred library,
// and `kplug credential`) made of one kubeconfig context, each from a run of its own.
type parity struct {
	clientGoErr    error
	clientGoBearer string // the Authorization header client-go sent
	clientGoOutput string // what the plugin printed for client-go
	libErr         error
	libCred        *execcred.Credential
	libOutput      string
	cliErr         error
	cliStderr      string
	cliCred        credentialJSON
	cliOutput      string
}

// runParity runs the context through client-go, the execcred library and `kplug
// credential`. The plugin must be p's recorder; it runs once for each (no run when a
// client refuses the configuration itself).
func runParity(t *testing.T, p *recordedPlugin, kplug, kubeconfig, kubeContext string, srv *bearerRecorder) parity {
	t.Helper()
	var r parity
	before := p.runs()
	taken := func() string { // what the plugin printed in the run just made, if any
		if p.runs() == before {
			return ""
		}
		before = p.runs()
		return p.takeOutput(t)
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	cfg, err := loader.ClientConfig()
	if err != nil {
		t.Fatalf("clientcmd: %v", err)
	}

	// client-go: one request, as any client makes it.
	r.clientGoErr = exectest.ClientGoGet(t, cfg, srv.URL)
	if r.clientGoErr == nil {
		r.clientGoBearer = srv.last()
	}
	r.clientGoOutput = taken()

	// The execcred library, as a Go program uses it.
	src, err := execcred.NewForRESTConfig(rest.CopyConfig(cfg), execcred.Options{})
	if err != nil {
		r.libErr = err
	} else {
		r.libCred, r.libErr = src.Credential(t.Context(), nil)
	}
	r.libOutput = taken()

	// kplug credential, with the same environment as this process (and so as the two above).
	out, errOut, err := runEnv(t, os.Environ(), kplug, "credential", "--kubeconfig", kubeconfig, "--context", kubeContext, "-o", "json", "--show-token")
	r.cliErr, r.cliStderr = err, errOut
	if err == nil {
		if jerr := json.Unmarshal([]byte(out), &r.cliCred); jerr != nil {
			t.Fatalf("kplug credential -o json: %v\n%s", jerr, out)
		}
	}
	r.cliOutput = taken()
	return r
}

// checkAccepted checks that client-go and both forms of kplug's runtime accepted the
// credential, and that each used exactly the token and expiry its run of the plugin printed.
// It returns the three tokens (client-go, library, CLI).
func (r parity) checkAccepted(t *testing.T, apiVersion string) []string {
	t.Helper()
	if r.clientGoErr != nil || r.libErr != nil || r.cliErr != nil {
		t.Fatalf("client-go: %v\nexeccred: %v\nkplug credential: %v\n%s", r.clientGoErr, r.libErr, r.cliErr, r.cliStderr)
	}
	for _, c := range []struct {
		who, output, token string
		expiry             *time.Time
	}{
		{"client-go", r.clientGoOutput, strings.TrimPrefix(r.clientGoBearer, "Bearer "), nil},
		{"execcred", r.libOutput, r.libCred.Token, &r.libCred.Expiry},
		{"kplug credential", r.cliOutput, r.cliCred.Token, r.cliCred.Expiration},
	} {
		printed := decodePluginOutput(t, c.output)
		if printed.APIVersion != apiVersion {
			t.Errorf("the plugin answered %s for %s, want %s", printed.APIVersion, c.who, apiVersion)
		}
		if c.token == "" || c.token != printed.Status.Token {
			t.Errorf("%s used token %.40q..., the plugin printed %.40q...", c.who, c.token, printed.Status.Token)
		}
		if c.expiry != nil && (printed.Status.ExpirationTimestamp == nil || !c.expiry.Equal(*printed.Status.ExpirationTimestamp)) {
			t.Errorf("%s: expiry %v, the plugin printed %v", c.who, c.expiry, printed.Status.ExpirationTimestamp)
		}
	}
	if !strings.HasPrefix(r.clientGoBearer, "Bearer ") {
		t.Errorf("client-go sent Authorization %.20q...", r.clientGoBearer)
	}
	if r.cliCred.APIVersion != apiVersion || r.cliCred.Kind != "token" {
		t.Errorf("kplug credential: %s %s", r.cliCred.APIVersion, r.cliCred.Kind)
	}
	return []string{strings.TrimPrefix(r.clientGoBearer, "Bearer "), r.libCred.Token, r.cliCred.Token}
}

// checkRejected checks that client-go and both forms of kplug's runtime refused the answer
// (or the plugin's failure), each with an error containing its want.
func (r parity) checkRejected(t *testing.T, clientGoWant, kplugWant string) {
	t.Helper()
	if r.clientGoErr == nil || !strings.Contains(r.clientGoErr.Error(), clientGoWant) {
		t.Errorf("client-go: %v, want an error containing %q", r.clientGoErr, clientGoWant)
	}
	if r.libErr == nil || !strings.Contains(r.libErr.Error(), kplugWant) {
		t.Errorf("execcred: %v, want an error containing %q", r.libErr, kplugWant)
	}
	if r.cliErr == nil || exitCode(r.cliErr) != 1 || !strings.Contains(r.cliStderr, kplugWant) {
		t.Errorf("kplug credential: exit %d, %q, want exit 1 and %q", exitCode(r.cliErr), r.cliStderr, kplugWant)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
