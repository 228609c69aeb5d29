//go:build linux

package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kplug/kplug/internal/testkit/poll"
)

// proxyKubeconfig writes a kubeconfig whose user runs this test binary as
// `kplug proxy-plugin args...` against srv.
func proxyKubeconfig(t *testing.T, srv *httptest.Server, args ...string) string {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority-data: %q}
users:
- name: proxied
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: %q
      args: [proxy-plugin, %s]
      env: [{name: %s, value: "1"}]
      provideClusterInfo: true
      interactiveMode: Never
contexts:
- name: proxied
  context: {cluster: c, user: proxied}
current-context: proxied
`, srv.URL, base64.StdEncoding.EncodeToString(ca), os.Args[0], strings.Join(quoted, ", "), kplugEnv)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runtimeDir gives the exec proxy's client and daemons a short runtime directory (socket
// paths are limited to about 100 bytes) and waits, at the end, until the daemons are gone.
func runtimeDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kp")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_RUNTIME_DIR", dir)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	t.Cleanup(func() {
		poll.Until(t, "the exec proxies to exit after their client ended", func() bool {
			m, _ := filepath.Glob(filepath.Join(dir, "kplug", "proxy-*.sock"))
			return len(m) == 0
		})
	})
	return dir
}

// daemonCommandLines returns the command lines of the exec proxy daemons this test binary
// runs, and whether any process at all has needle in its command line.
func daemonCommandLines(t *testing.T, needle string) (daemons []string, anywhere bool) {
	self, err := os.Executable()
	if err != nil {
		t.Error(err)
		return nil, false
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil {
			continue // gone
		}
		anywhere = anywhere || bytes.Contains(cmdline, []byte(needle))
		if exe, _ := os.Readlink(filepath.Join(p, "exe")); exe == self && bytes.Contains(cmdline, []byte("\x00--daemon")) {
			daemons = append(daemons, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return daemons, anywhere
}

// TestSecurityProxyDaemonCommandLine runs `kplug request` through `kplug proxy-plugin`
// with one header value in the kubeconfig and one in a file (NAME=@FILE), and looks at
// every process's command line while the request is at the API server: the long-lived
// daemon's holds neither value, and no process's holds the one from the file.
// Issue 12 finding 7: --header values stayed in the daemon's command line (ps).
func TestSecurityProxyDaemonCommandLine(t *testing.T) {
	const inArgs, inFile = "argv-secret-4f1c0d", "file-secret-9b2e7a"
	keyFile := filepath.Join(t.TempDir(), "api-key")
	if err := os.WriteFile(keyFile, []byte(inFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var (
		mu               sync.Mutex
		got, daemons     []string
		fileValueVisible bool
	)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = []string{r.Header.Get("X-From-Args"), r.Header.Get("X-From-File")}
		daemons, fileValueVisible = daemonCommandLines(t, inFile)
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	runtimeDir(t)
	kc := proxyKubeconfig(t, srv, "--header", "X-From-Args="+inArgs, "--header", "X-From-File=@"+keyFile)
	code, out, errOut := run(t, "request", "--kubeconfig", kc, "/probe")
	if code != ExitOK || out != "ok" {
		t.Fatalf("kplug request: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{inArgs, inFile}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the API server got the headers %q, want %q", got, want)
	}
	if len(daemons) == 0 {
		t.Fatal("found no exec proxy daemon while it served the request")
	}
	for _, d := range daemons {
		if strings.Contains(d, inArgs) || strings.Contains(d, inFile) || strings.Contains(d, "--header") {
			t.Errorf("a daemon's command line shows the header: %q", d)
		}
	}
	if fileValueVisible {
		t.Error("a command line holds the header value read from a file")
	}
}

// TestSecurityPluginUsageErrorShownOnce runs kplug run, request and credential with an exec
// plugin that rejects its arguments: the plugin's message reaches the user once, as the
// plugin wrote it, then one line says which plugin failed, and kplug exits 2 (an invalid
// configuration: the kubeconfig's exec arguments).
// Issue 12 finding 16: the same message was printed three times, and kplug exited 1.
func TestSecurityPluginUsageErrorShownOnce(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	runtimeDir(t)
	kc := proxyKubeconfig(t, srv, "--bogus")
	want := "Error: unknown flag: --bogus\nRun 'kplug proxy-plugin --help' for usage.\n" +
		fmt.Sprintf("Error: execcred: plugin %q exited with code 2 (its stderr is above)\n", os.Args[0])
	for _, args := range [][]string{
		{"run", "--kubeconfig", kc, "--", "true"},
		{"request", "--kubeconfig", kc, "/version"},
		{"credential", "--kubeconfig", kc},
	} {
		code, out, errOut := run(t, args...)
		if code != ExitUsage || out != "" || errOut != want {
			t.Errorf("kplug %s: code %d, stdout %q\nstderr %q\nwant   %q", args[0], code, out, errOut, want)
		}
	}
}
