package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/test/e2e/framework"
)

// TestPeerproxyExitsWhenLeasesAreForbidden covers issue 32: `kplug peerproxy` with
// docs/peerproxy-rbac.yaml applied and --lease-namespace=kube-system (the flag's old
// default) said it was serving, then logged the apiserver's 403 forever, in klog's format
// beside its own. Against a real apiserver it must exit 1, saying what to grant, with
// every log line in its own format.
func TestPeerproxyExitsWhenLeasesAreForbidden(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	kubectlApply(t, cp, "-f", filepath.Join(moduleRoot(t), "docs", "peerproxy-rbac.yaml"))
	etc := filepath.Join(t.TempDir(), "etc", "kubernetes")
	kubeadmFiles(t, cp, etc)
	kplug := buildBinary(t, t.TempDir(), "./cmd/kplug", "kplug")
	p := cp.PKI
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kplug, "peerproxy", "--kubeconfig="+filepath.Join(etc, "kplug-peerproxy.conf"),
		"--apiserver="+cp.Servers[0].URL, "--lease-namespace=kube-system", "--id=kplug-peerproxy-test",
		fmt.Sprintf("--listen-address=127.0.0.1:%d", freePort(t)),
		"--tls-cert-file="+p.Serving.CertFile, "--tls-private-key-file="+p.Serving.KeyFile,
		"--requestheader-client-ca-file="+p.FrontProxyCA.File, "--requestheader-allowed-names="+framework.FrontProxyClientName,
		"--proxy-client-cert-file="+p.ProxyClient.CertFile, "--proxy-client-key-file="+p.ProxyClient.KeyFile,
		"--peer-ca-file="+p.ClusterCA.File) // the serving certificate holds the peer server name
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("kplug peerproxy: %v, want exit 1:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := `Error: peerproxy: --lease-namespace=kube-system: sidecar: the sidecar's user may not list Leases in namespace "kube-system": ` +
		`grant it get, list, watch, create, update and delete on leases there (docs/peerproxy-rbac.yaml does, in namespace kplug-peerproxy): ` +
		`leases.coordination.k8s.io is forbidden: User "kplug-peerproxy" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"`
	if last := lines[len(lines)-1]; last != want {
		t.Errorf("last line\n%s\nwant\n%s", last, want)
	}
	klog := regexp.MustCompile(`^[IWEF]\d{4} `)
	for _, l := range lines {
		if klog.MatchString(l) {
			t.Errorf("a line in klog's format: %s", l)
		}
	}
}
