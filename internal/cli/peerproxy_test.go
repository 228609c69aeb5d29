package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

func TestPeerproxyInvalidConfigurationExitsTwo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"nothing given", []string{"peerproxy"},
			"Error: --kubeconfig is required\n--tls-cert-file is required\n--tls-private-key-file is required\n--requestheader-client-ca-file is required\n--proxy-client-cert-file is required\n--proxy-client-key-file is required\n--peer-ca-file is required\n"},
		{"unreadable files", []string{"peerproxy", "--kubeconfig=" + filepath.Join(dir, "kc"), "--tls-cert-file=" + filepath.Join(dir, "missing.crt"),
			"--tls-private-key-file=k", "--requestheader-client-ca-file=" + notPEM, "--proxy-client-cert-file=p", "--proxy-client-key-file=p",
			"--peer-ca-file=" + notPEM, "--listen-address=:6444"}, ""},
		{"arguments", []string{"peerproxy", "extra"}, "Error: unknown command \"extra\" for \"kplug peerproxy\"\nRun 'kplug peerproxy --help' for usage.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, tt.args...)
			if code != ExitUsage || out != "" {
				t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
			}
			if tt.wantStderr != "" && errOut != tt.wantStderr {
				t.Errorf("stderr\n%q\nwant\n%q", errOut, tt.wantStderr)
			}
			if tt.name == "unreadable files" {
				for _, want := range []string{
					"--tls-cert-file/--tls-private-key-file: open " + filepath.Join(dir, "missing.crt") + ": no such file or directory",
					"--peer-ca-file " + notPEM + ": no PEM certificate in it",
					"--requestheader-client-ca-file " + notPEM + ": no PEM certificate in it",
					`--advertise-address is required when --listen-address ":6444" names no host`,
				} {
					if !strings.Contains(errOut, want) {
						t.Errorf("stderr lacks %q:\n%s", want, errOut)
					}
				}
			}
		})
	}
}

// writeCert writes into dir a CA, prefix-ca.crt, and a serving certificate it signs for
// names, prefix.crt and prefix.key, and returns the three files.
func writeCert(t *testing.T, dir, prefix string, names ...string) (caFile, certFile, keyFile string) {
	t.Helper()
	ca, err := testpki.NewCA(dir, prefix+"-ca", prefix+" CA")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.IssueServing(prefix, names...)
	if err != nil {
		t.Fatal(err)
	}
	return ca.File, kp.CertFile, kp.KeyFile
}

// kubeconfig writes a kubeconfig for a local apiserver at an address nothing serves:
// enough for peerproxy to build its options; sidecar.New contacts nobody.
func kubeconfig(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig")
	kc := `apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: sidecar, user: {token: sidecar-token}}]
contexts: [{name: local, context: {cluster: local, user: sidecar}}]
current-context: local
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The certificate a sidecar presents to peers must verify with the peer CA for the peer
// server name, or peers would refuse it; and one CA for users and front proxies, with any
// front proxy name allowed, would let every user assert any identity. peerproxy refuses
// both at start (sidecar.New's checks), naming its flags.
func TestPeerproxyRefusesUnsafeCertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clusterCA, serving, servingKey := writeCert(t, dir, "serving", "apiserver.example")
	peerCA, peer, peerKey := writeCert(t, dir, "peer", "kubernetes.default.svc")
	// The listen address cannot be listened on: a configuration that passes gets as far
	// as listening, and fails there instead of serving.
	common := []string{"peerproxy", "--kubeconfig=" + kubeconfig(t, dir), "--tls-cert-file=" + serving, "--tls-private-key-file=" + servingKey,
		"--requestheader-client-ca-file=" + clusterCA, "--proxy-client-cert-file=" + serving, "--proxy-client-key-file=" + servingKey,
		"--listen-address=127.0.0.1:-1", "--advertise-address=10.0.0.1:6444"}
	withPeerCert := []string{"--peer-ca-file=" + peerCA, "--peer-tls-cert-file=" + peer, "--peer-tls-private-key-file=" + peerKey}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"serving certificate without the peer server name", []string{"--peer-ca-file=" + clusterCA},
			`--tls-cert-file: peers would refuse this sidecar: the certificate does not verify with --peer-ca-file for --peer-server-name "kubernetes.default.svc" (x509: certificate is valid for apiserver.example, not kubernetes.default.svc); issue one from the peer CA for that name`},
		{"peer certificate from another CA", []string{"--peer-ca-file=" + clusterCA, "--peer-tls-cert-file=" + peer, "--peer-tls-private-key-file=" + peerKey},
			`--peer-tls-cert-file: peers would refuse this sidecar: the certificate does not verify with --peer-ca-file for --peer-server-name "kubernetes.default.svc" (x509: certificate signed by unknown authority`},
		{"peer certificate without its key", []string{"--peer-ca-file=" + peerCA, "--peer-tls-cert-file=" + peer},
			"--peer-tls-cert-file and --peer-tls-private-key-file go together"},
		{"one CA for users and front proxies, no allowed names", append(slices.Clone(withPeerCert), "--client-ca-file="+clusterCA),
			"--client-ca-file and --requestheader-client-ca-file are the same CA and --requestheader-allowed-names is empty: every user's client certificate would be trusted to assert any identity; use a separate front-proxy CA or set --requestheader-allowed-names"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := run(t, append(slices.Clone(common), tt.args...)...)
			if code != ExitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("code %d, stderr lacks %q:\n%s", code, tt.want, errOut)
			}
		})
	}
	// The dedicated peer CA's certificate, and the shared CA with the front proxy's name
	// pinned, are accepted: the sidecar gets as far as listening.
	for _, extra := range [][]string{withPeerCert, append(slices.Clone(withPeerCert), "--client-ca-file="+clusterCA, "--requestheader-allowed-names=front-proxy-client")} {
		code, _, errOut := run(t, append(slices.Clone(common), extra...)...)
		if code != ExitFailure || !strings.Contains(errOut, "sidecar: listening on 127.0.0.1:-1") {
			t.Errorf("%v: code %d, stderr:\n%s", extra, code, errOut)
		}
	}
}

// TestServerHelpMarksRequiredFlags covers issue 32: --help of both servers marks each flag
// they refuse to start without, as the error that lists them when none is given.
func TestServerHelpMarksRequiredFlags(t *testing.T) {
	t.Parallel()
	for _, server := range []string{"peerproxy", "signature-proxy"} {
		_, _, errOut := run(t, server)
		var required []string
		for _, line := range strings.Split(strings.TrimPrefix(errOut, "Error: "), "\n") {
			if flag, ok := strings.CutSuffix(line, " is required"); ok {
				required = append(required, flag)
			}
		}
		if len(required) < 5 {
			t.Fatalf("%s with no flags names %d required flags:\n%s", server, len(required), errOut)
		}
		_, help, _ := run(t, server, "--help")
		marked := map[string]bool{}
		for _, line := range strings.Split(help, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "--") {
				marked[f[0]] = strings.HasSuffix(line, "(required)")
			}
		}
		for flag, isMarked := range marked {
			if isMarked != slices.Contains(required, flag) {
				t.Errorf("%s --help: %s marked required: %v; the command requires %v", server, flag, isMarked, required)
			}
		}
	}
}

// TestPeerproxyHelpMatchesTheStaticPod covers issue 32: the example of `kplug peerproxy
// --help` named other files than deploy/peerproxy's static pod, and the flag's default
// Lease namespace was one docs/peerproxy-rbac.yaml grants nothing in.
func TestPeerproxyHelpMatchesTheStaticPod(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "peerproxy", "kplug-peerproxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		t.Fatal(err)
	}
	_, help, _ := run(t, "peerproxy", "--help")
	example := map[string]string{}
	for _, f := range strings.Fields(help[strings.Index(help, "Examples:"):strings.Index(help, "Flags:")]) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "--") {
			example[k] = v
		}
	}
	files := 0
	for _, a := range pod.Spec.Containers[0].Args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(v, "/") {
			continue
		}
		files++
		if example[k] != v {
			t.Errorf("--help's example has %s=%s; the static pod %s=%s", k, example[k], k, v)
		}
	}
	if files < 9 {
		t.Errorf("the static pod names %d files; the test reads its args wrong", files)
	}

	rbac, err := os.ReadFile(filepath.Join("..", "..", "docs", "peerproxy-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(help, `namespace of the identity Leases, where the sidecar's user may get, list, watch, create, update and delete Leases (docs/peerproxy-rbac.yaml) (default "kplug-peerproxy")`) ||
		!strings.Contains(string(rbac), "kind: Role\nmetadata:\n  name: kplug-peerproxy\n  namespace: kplug-peerproxy\n") {
		t.Errorf("--lease-namespace's default is not the namespace of docs/peerproxy-rbac.yaml's Role:\n%s", help)
	}
}
