package execcred

import (
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
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kplug/kplug/internal/testkit/exectest"
)

// These tests use client-go itself as the oracle: the same kubeconfig and the same fake
// plugin go through client-go's exec authenticator and through this package, and what the
// plugin saw and what was accepted must be the same.

// tokenServer records the Authorization header of each request.
type tokenServer struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newTokenServer(t *testing.T) *tokenServer {
	s := &tokenServer{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *tokenServer) caPEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}))
}

// kubeconfig writes a kubeconfig whose user runs the fake plugin and loads it with clientcmd.
func kubeconfig(t *testing.T, f *exectest.Plugin, server, caPEM, clusterExtra, execExtra, apiVersion string) *rest.Config {
	t.Helper()
	var env strings.Builder
	for _, kv := range f.Env() {
		name, value, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&env, "      - name: %s\n        value: %q\n", name, value)
	}
	ca := ""
	if caPEM != "" {
		ca = "    certificate-authority-data: " + b64(caPEM) + "\n"
	}
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
%s%scontexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
users:
- name: u
  user:
    exec:
      apiVersion: %s
      command: %s
      interactiveMode: Never
%s      env:
%s`, server, ca, clusterExtra, apiVersion, f.Path(), execExtra, env.String())
	path := filepath.Join(f.Dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("clientcmd: %v\n%s", err, doc)
	}
	return cfg
}

func TestExecInfoBytesMatchClientGo(t *testing.T) {
	t.Parallel()
	srv := newTokenServer(t)
	tests := []struct {
		name, apiVersion, clusterExtra, execExtra string
	}{
		{"v1 without cluster info", V1, "", ""},
		{"v1beta1 without cluster info", V1beta1, "", ""},
		{"v1 with cluster info and extension", V1,
			"    tls-server-name: example.com\n    disable-compression: true\n    extensions:\n    - name: client.authentication.k8s.io/exec\n      extension: {audience: aud-123, arbitrary: [1, 2], nested: {b: 1, a: \"<&>\"}}\n",
			"      provideClusterInfo: true\n"},
		{"v1beta1 with cluster info", V1beta1, "", "      provideClusterInfo: true\n"},
		{"v1 with cluster info, no extension", V1, "    proxy-url: http://127.0.0.1:9\n", "      provideClusterInfo: true\n"},
	}
	for _, tt := range tests {
		theirs, ours := exectest.New(t), exectest.New(t)
		for _, f := range []*exectest.Plugin{theirs, ours} {
			f.Stdout(tokenOutput(tt.apiVersion, "t", time.Time{}))
		}
		// Same kubeconfig apart from the fake's private directory. The request itself may
		// fail (the proxy-url case points nowhere): the plugin runs before it is sent.
		_ = exectest.ClientGoGet(t, kubeconfig(t, theirs, srv.URL, srv.caPEM(), tt.clusterExtra, tt.execExtra, tt.apiVersion), srv.URL)
		cfg, err := FromRESTConfig(kubeconfig(t, ours, srv.URL, srv.caPEM(), tt.clusterExtra, tt.execExtra, tt.apiVersion))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Env = ours.Env() // FromRESTConfig read them from the kubeconfig; keep ours
		if _, err := newSource(t, *cfg, Options{}).Credential(t.Context(), nil); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		want, got := infos(theirs), infos(ours)
		if len(want) != 1 || !strings.HasSuffix(want[0], "\n") {
			t.Fatalf("%s: client-go ran the plugin with %q", tt.name, want)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: KUBERNETES_EXEC_INFO differs from client-go's (-client-go +ours):\n%s", tt.name, diff)
		}
	}
}

func TestOutputDecodingMatchesClientGo(t *testing.T) {
	t.Parallel()
	certPEM, keyPEM := clientCert(t)
	jsonStr := func(s string) string { return fmt.Sprintf("%q", s) }
	outputs := map[string]string{
		"json":               `{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok"}}`,
		"yaml":               "kind: ExecCredential\napiVersion: client.authentication.k8s.io/v1\nstatus:\n  token: tok\n",
		"bom":                "\xef\xbb\xbf" + `{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok"}}`,
		"no kind":            `{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok"}}`,
		"wrong kind":         `{"kind":"Foo","apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok"}}`,
		"no apiVersion":      `{"kind":"ExecCredential","status":{"token":"tok"}}`,
		"empty":              ``,
		"whitespace":         " \n",
		"other version":      `{"apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":"tok"}}`,
		"v1alpha1":           `{"apiVersion":"client.authentication.k8s.io/v1alpha1","status":{"token":"tok"}}`,
		"other group":        `{"apiVersion":"example.com/v1","status":{"token":"tok"}}`,
		"trailing garbage":   `{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok"}}garbage`,
		"two objects":        `{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"a"}}{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"b"}}`,
		"log line first":     "fetching token...\n" + `{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok"}}`,
		"array":              `[{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok"}}]`,
		"unknown fields":     `{"apiVersion":"client.authentication.k8s.io/v1","extra":1,"status":{"token":"tok","more":true}}`,
		"duplicate keys":     `{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"first","token":"last"}}`,
		"capitalised key":    `{"apiVersion":"client.authentication.k8s.io/v1","status":{"Token":"tok"}}`,
		"status null":        `{"apiVersion":"client.authentication.k8s.io/v1","status":null}`,
		"no status":          `{"apiVersion":"client.authentication.k8s.io/v1"}`,
		"empty status":       `{"apiVersion":"client.authentication.k8s.io/v1","status":{}}`,
		"bad timestamp":      `{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok","expirationTimestamp":"tomorrow"}}`,
		"fractional seconds": `{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok","expirationTimestamp":"2099-01-02T03:04:05.123+02:00"}}`,
		"null timestamp":     `{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok","expirationTimestamp":null}}`,
		"only certificate":   `{"apiVersion":"client.authentication.k8s.io/v1","status":{"clientCertificateData":` + jsonStr(certPEM) + `}}`,
		"only key":           `{"apiVersion":"client.authentication.k8s.io/v1","status":{"clientKeyData":` + jsonStr(keyPEM) + `}}`,
		"certificate":        `{"apiVersion":"client.authentication.k8s.io/v1","status":{"clientCertificateData":` + jsonStr(certPEM) + `,"clientKeyData":` + jsonStr(keyPEM) + `}}`,
		"bad PEM":            `{"apiVersion":"client.authentication.k8s.io/v1","status":{"clientCertificateData":"nope","clientKeyData":"nope"}}`,
		"number token":       `{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":42}}`,
		"spec ignored":       `{"apiVersion":"client.authentication.k8s.io/v1","spec":{"interactive":true},"status":{"token":"tok"}}`,
	}
	srv := newTokenServer(t)
	for name, out := range outputs {
		f := exectest.New(t).Stdout(out)
		theirErr := exectest.ClientGoGet(t, kubeconfig(t, f, srv.URL, srv.caPEM(), "", "", V1), srv.URL)
		srv.mu.Lock()
		theirAuth := ""
		if theirErr == nil {
			theirAuth = srv.auth[len(srv.auth)-1]
		}
		srv.mu.Unlock()

		cred, ourErr := DecodeOutput(V1, []byte(out))
		if (theirErr == nil) != (ourErr == nil) {
			t.Errorf("%s: client-go error %v, ours %v", name, theirErr, ourErr)
			continue
		}
		if ourErr == nil {
			ourAuth := ""
			if cred.Token != "" {
				ourAuth = "Bearer " + cred.Token
			}
			if ourAuth != theirAuth {
				t.Errorf("%s: client-go sent %q, ours would send %q", name, theirAuth, ourAuth)
			}
		}
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestFailureStatusAgainstClientGo (issue 28, kubernetes/kubernetes#139150): the same
// failing plugins, one written with the SDK and one by hand, through client-go at the
// version go.mod pins and through kplug. client-go v0.36.3 has no ExecPluginStatusError
// gate: it reports the exit code alone, the status it cannot read is lost, and the user
// sees only the plugin's stderr, which client-go passes through. kplug shows the message.
// When a client-go upgrade reads the status, the first check fails: then compare the
// messages instead.
func TestFailureStatusAgainstClientGo(t *testing.T) {
	t.Parallel()
	srv := newTokenServer(t)
	for _, tt := range []struct {
		name string
		fake func(*exectest.Plugin)
		code int
		msg  string
	}{
		{"SDK", func(p *exectest.Plugin) { p.Behaviour("sdk-status") }, 1, sdkMessage},
		{"by hand", func(p *exectest.Plugin) {
			p.Stdout(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"no session","reason":"Unauthorized","code":401}`).Exit(2)
		}, 2, "no session"},
	} {
		f := exectest.New(t)
		tt.fake(f)
		cfg := kubeconfig(t, f, srv.URL, srv.caPEM(), "", "", V1)
		theirs := exectest.ClientGoGet(t, cfg, srv.URL)
		want := fmt.Sprintf("Get %q: getting credentials: exec: executable %s failed with exit code %d", srv.URL, f.Path(), tt.code)
		if theirs == nil || theirs.Error() != want {
			t.Errorf("%s: client-go: %v\nwant %s", tt.name, theirs, want)
		}
		ours, err := FromRESTConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = newSource(t, *ours, Options{}).Credential(t.Context(), nil)
		if want := fmt.Sprintf("execcred: plugin %q exited with code %d: %s", f.Path(), tt.code, tt.msg); err == nil || err.Error() != want {
			t.Errorf("%s: kplug: %v\nwant %s", tt.name, err, want)
		}
		if f.Runs() != 2 {
			t.Errorf("%s: %d runs, want one by each", tt.name, f.Runs())
		}
	}
}
