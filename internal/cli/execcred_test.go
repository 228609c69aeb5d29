package cli

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/execcache"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

// kplugEnv makes the test binary kplug itself, so that a kubeconfig's exec block can run
// `kplug proxy-plugin`, and the daemon that starts is kplug too.
const kplugEnv = "KPLUG_CLI_AS_KPLUG"

func TestMain(m *testing.M) {
	if os.Getenv(kplugEnv) != "" {
		os.Exit(Run(context.Background(), os.Args[1:], IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})) //nolint:forbidigo // a helper process: no test here
	}
	exectest.Main(nil) // exec plugins and image credential providers
	// kplug runs in process here: the test is exec-cache's client, with its environment
	// as the test sets it.
	callerOf = func(int) execcache.Caller { return execcache.Caller{Environ: os.Environ(), Args: os.Args} }
	os.Exit(m.Run())
}

// apiServer answers /ok with 200 for the right token, everything else with 403.
func apiServer(t *testing.T) *httptest.Server {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret-token-0123456789abcdef" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/ok" {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","code":403}`)
			return
		}
		body := new(bytes.Buffer)
		_, _ = body.ReadFrom(r.Body)
		fmt.Fprintf(w, `{"method":%q,"body":%q}`, r.Method, body.String())
	}))
	t.Cleanup(srv.Close)
	return srv
}

func writeKubeconfig(t *testing.T, srv *httptest.Server, credential string) string {
	t.Helper()
	path, _ := writePluginKubeconfig(t, srv, credential)
	return path
}

// writePluginKubeconfig is writeKubeconfig, also returning the fake plugin.
func writePluginKubeconfig(t *testing.T, srv *httptest.Server, credential string) (string, *exectest.Plugin) {
	t.Helper()
	plugin := exectest.New(t).Stdout(credential)
	caFile := writeServerCA(t, srv)
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority: %q}
users:
- name: exec
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: %q
      interactiveMode: Never
      env:
      - {name: %s, value: %q}
- name: static
  user: {token: static}
contexts:
- name: exec
  context: {cluster: c, user: exec}
- name: static
  context: {cluster: c, user: static}
current-context: exec
`, srv.URL, caFile, plugin.Path(), exectest.Env, plugin.Dir)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, plugin
}

// writeServerCA writes srv's certificate, the CA to trust it by, to a file and returns
// its path.
func writeServerCA(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile
}

const tokenCredential = `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"secret-token-0123456789abcdef","expirationTimestamp":"2099-01-02T03:04:05Z"}}`

func TestCredentialCommand(t *testing.T) {
	t.Parallel()
	kc := writeKubeconfig(t, apiServer(t), tokenCredential)
	code, out, errOut := runIn(t, "", "credential", "--kubeconfig", kc)
	want := regexp.MustCompile(`^plugin:      \S+ \(client.authentication.k8s.io/v1\)
credential:  token
token:       <redacted, 29 bytes>
expires:     2099-01-02T03:04:05Z \(in \d+ days\)
$`)
	if code != ExitOK || !want.MatchString(out) || errOut != "" {
		t.Errorf("code %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if strings.Contains(out, "0123456789abcdef") {
		t.Error("the token was printed without --show-token")
	}

	code, out, _ = runIn(t, "", "credential", "--kubeconfig", kc, "-o", "json", "--show-token")
	wantJSON := fmt.Sprintf(`{
  "command": %q,
  "apiVersion": "client.authentication.k8s.io/v1",
  "kind": "token",
  "token": "secret-token-0123456789abcdef",
  "expirationTimestamp": "2099-01-02T03:04:05Z"
}
`, os.Args[0])
	if code != ExitOK || out != wantJSON {
		t.Errorf("json: code %d\n%s\nwant\n%s", code, out, wantJSON)
	}

	code, out, _ = runIn(t, "", "credential", "--kubeconfig", kc, "-o", "yaml")
	wantYAML := fmt.Sprintf(`apiVersion: client.authentication.k8s.io/v1
command: %s
expirationTimestamp: "2099-01-02T03:04:05Z"
kind: token
token: <redacted, 29 bytes>
`, os.Args[0])
	if code != ExitOK || out != wantYAML {
		t.Errorf("yaml: code %d\n%s\nwant\n%s", code, out, wantYAML)
	}
}

func TestRequestCommand(t *testing.T) {
	t.Parallel()
	srv := apiServer(t)
	kc := writeKubeconfig(t, srv, tokenCredential)
	code, out, errOut := runIn(t, "from stdin", "request", "--kubeconfig", kc, "/ok", "-d", "-")
	if code != ExitOK || out != `{"method":"POST","body":"from stdin"}` || errOut != "" {
		t.Errorf("request: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runIn(t, "", "request", "--kubeconfig", kc, "-X", "DELETE", "/forbidden")
	if code != ExitFailure || out != `{"kind":"Status","code":403}` || errOut != "Error: DELETE /forbidden: 403 Forbidden\n" {
		t.Errorf("403: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestExecCommandsConfigErrors(t *testing.T) {
	t.Parallel()
	srv := apiServer(t)
	kc := writeKubeconfig(t, srv, tokenCredential)
	bad := writeKubeconfig(t, srv, `{"apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":"x"}}`)
	tests := []struct {
		args       []string
		wantCode   int
		wantStderr string
	}{
		{[]string{"credential", "--kubeconfig", filepath.Join(t.TempDir(), "missing")}, ExitUsage, "missing does not exist\n"},
		{[]string{"credential", "--kubeconfig", kc, "--context", "static"}, ExitUsage, "Error: the context's user has no exec credential plugin\n"},
		{[]string{"credential", "--kubeconfig", kc, "--context", "nope"}, ExitUsage, `Error: loading kubeconfig: no context "nope" in ` + kc + `; contexts there: "exec", "static"` + "\n"},
		{[]string{"request", "--kubeconfig", kc, "ok"}, ExitUsage, "Error: PATH \"ok\" must start with /\n"},
		{[]string{"credential", "--kubeconfig", bad}, ExitFailure, "exec plugin is configured to use API version client.authentication.k8s.io/v1, plugin returned version client.authentication.k8s.io/v1beta1\n"},
	}
	for _, tt := range tests {
		code, out, errOut := runIn(t, "", tt.args...)
		if code != tt.wantCode || out != "" || !strings.Contains(errOut, tt.wantStderr) {
			t.Errorf("%v: code %d (want %d)\nstdout %q\nstderr %q\nwant   %q", tt.args, code, tt.wantCode, out, errOut, tt.wantStderr)
		}
	}
}
