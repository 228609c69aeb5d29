//go:build linux

package e2e

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/internal/cli"
	"github.com/kplug/kplug/internal/testkit/testlog"
	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestDeployPeerproxy validates deploy/peerproxy against kube-apiserver: the RBAC it
// needs (docs/peerproxy-rbac.yaml) applies, the static pod passes a server-side dry run
// with strict field validation, and its command line runs as the pod runs it: as the
// pod's user and groups, in a root holding only the release binary and the files the pod
// mounts from a node laid out as kubeadm's (keys it must not see included), made readable
// as the manifest says. There it serves kubectl and the pod's probes; with kubeadm's own
// modes it cannot read the keys.
func TestDeployPeerproxy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the static pod's command as the pod's user in a root of its mounted files (chroot)")
	}
	cp := startNodeControlPlane(t)
	rbac := filepath.Join(moduleRoot(t), "docs", "peerproxy-rbac.yaml")
	manifest := filepath.Join(moduleRoot(t), "deploy", "peerproxy", "kplug-peerproxy.yaml")
	kubectlApply(t, cp, "-f", rbac) // for real: its Role needs its Namespace
	if out := kubectlApply(t, cp, "--dry-run=server", "--validate=strict", "-f", manifest); !strings.Contains(out, "pod/kplug-peerproxy created (server dry run)") {
		t.Errorf("dry run: %s", out)
	}

	// The node: kubeadm's /etc/kubernetes, made of this control plane's files, and a
	// peer CA and certificate as docs/getting-started/cluster-operator.md makes them.
	etc := filepath.Join(t.TempDir(), "etc", "kubernetes")
	kubeadmFiles(t, cp, etc)
	peerCA, err := cp.PKI.NewCA("kplug-peer-ca", "kplug peerproxy peer CA")
	if err != nil {
		t.Fatal(err)
	}
	peer, err := peerCA.Issue("peerproxy-peer", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kplug-peerproxy-node-1"},
		DNSNames:    []string{mvproxy.DefaultPeerServerName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	copyFileMode(t, peerCA.File, filepath.Join(etc, "pki/kplug/peer-ca.crt"), 0o644)
	copyFileMode(t, peer.CertFile, filepath.Join(etc, "pki/kplug/peerproxy-peer.crt"), 0o644)
	copyFileMode(t, peer.KeyFile, filepath.Join(etc, "pki/kplug/peerproxy-peer.key"), 0o600)
	copyFileMode(t, peer.KeyFile, filepath.Join(etc, "pki/kplug/peer-ca.key"), 0o600) // left on the node where it was made

	pod := readPod(t, manifest)
	c := pod.Spec.Containers[0]
	if c.Args[0] != "peerproxy" || pod.Spec.HostNetwork != true || c.SecurityContext == nil || *c.SecurityContext.ReadOnlyRootFilesystem != true {
		t.Fatalf("the static pod is not a host-network peerproxy with a read-only root: %+v", c)
	}
	kplug := buildStatic(t)

	// With kubeadm's modes (keys 0600 root) the pod's user cannot start.
	if code, out := runPodOnce(t, cp, pod, etc, kplug); code != cli.ExitUsage || !strings.Contains(out, "apiserver.key: permission denied") {
		t.Errorf("with kubeadm's modes: exit %d, want %d naming the unreadable key:\n%s", code, cli.ExitUsage, out)
	}
	// As the manifest says: the pod's group may read the secrets it mounts.
	for _, f := range mountedFiles(t, pod, etc) {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm()&0o004 != 0 {
			continue
		}
		if err := os.Chown(f, 0, int(*pod.Spec.SecurityContext.RunAsGroup)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	side := runPod(t, cp, 0, pod, etc, kplug)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// The probes the pod declares: readiness through the sidecar, anonymously, as the
	// kubelet probes; liveness on the metrics address.
	anonymous := userClient(t, cp, &framework.User{})
	eventually(ctx, t, "readiness probe /readyz through the sidecar", func() error {
		return expectStatus(ctx, anonymous, side.URL+c.ReadinessProbe.HTTPGet.Path, nil, http.StatusOK)
	})
	if err := expectStatus(ctx, anonymous, side.Metrics, nil, http.StatusOK); err != nil {
		t.Errorf("liveness probe: %v", err)
	}
	// kubectl through the sidecar, verifying it as it verifies the apiserver.
	kc := serverKubeconfig(t, cp.Admin, side.URL)
	out, err := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig", kc, "get", "namespace", "kplug-peerproxy", "-o", "name").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "namespace/kplug-peerproxy" {
		t.Errorf("kubectl through the sidecar: %q, %v", out, err)
	}
	// The sidecar keeps its identity Lease where the RBAC lets it.
	eventually(ctx, t, "the sidecar's Lease in kplug-peerproxy", func() error {
		leases, err := clientFor(t, cp, cp.Admin, 0).CoordinationV1().Leases("kplug-peerproxy").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(leases.Items) != 1 {
			return fmt.Errorf("%d leases, want 1", len(leases.Items))
		}
		return nil
	})
}

// podRoot lays out what the pod's container sees: the binary where the release image has
// it, and each file the pod mounts at its mount path, with the node file's content, owner
// and mode, as a bind mount shows it; nothing else. Directories are root's, 0755, so the
// pod's user can write nowhere, as with its read-only root filesystem.
func podRoot(t *testing.T, pod *corev1.Pod, etc, kplug string) string {
	t.Helper()
	root, err := os.MkdirTemp("", "kplug-pod-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFileMode(t, kplug, filepath.Join(root, "usr/local/bin/kplug"), 0o755)
	for mountPath, file := range mountedFiles(t, pod, etc) {
		st, err := os.Stat(file)
		if err != nil || !st.Mode().IsRegular() {
			t.Fatalf("the node has no file %s for the pod's %s: %v", file, mountPath, err)
		}
		dst := filepath.Join(root, mountPath)
		copyFileMode(t, file, dst, st.Mode().Perm())
		if err := os.Chown(dst, int(st.Sys().(*syscall.Stat_t).Uid), fileGroup(t, file)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// podCommand is the static pod's command, beside apiserver i, as a process that runs as
// the pod's user and groups in podRoot (chroot), with the image's environment.
func podCommand(ctx context.Context, t *testing.T, cp *framework.ControlPlane, i int, pod *corev1.Pod, etc, kplug string) (cmd *exec.Cmd, listen, metrics string) {
	t.Helper()
	args, listen, metrics := podArgs(t, cp, i, pod, "/etc/kubernetes/")
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil {
		t.Fatal("the pod names no user and group to run as")
	}
	cred := &syscall.Credential{Uid: uint32(*sc.RunAsUser), Gid: uint32(*sc.RunAsGroup)}
	for _, g := range sc.SupplementalGroups {
		cred.Groups = append(cred.Groups, uint32(g))
	}
	cmd = exec.CommandContext(ctx, "/usr/local/bin/kplug", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: podRoot(t, pod, etc, kplug), Credential: cred}
	cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/local/bin", "HOME=/home/nonroot"}
	return cmd, listen, metrics
}

// runPodOnce runs the pod's command until it exits, and returns its exit code and output.
func runPodOnce(t *testing.T, cp *framework.ControlPlane, pod *corev1.Pod, etc, kplug string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd, _, _ := podCommand(ctx, t, cp, 0, pod, etc, kplug)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running the pod's command: %v\n%s", err, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// runPod runs the pod's command beside apiserver i until the test ends, stopping it as
// the kubelet does (SIGTERM), and prints its output if the test failed.
func runPod(t *testing.T, cp *framework.ControlPlane, i int, pod *corev1.Pod, etc, kplug string) *sidecar {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cmd, listen, metrics := podCommand(ctx, t, cp, i, pod, etc, kplug)
	s := &sidecar{URL: "https://" + listen, Metrics: "http://" + metrics + "/metrics", cancel: cancel, done: make(chan struct{}), log: &testlog.Buffer{}}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(s.done)
		_ = cmd.Wait()
		s.code = cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
		if t.Failed() {
			t.Logf("===== the static pod beside %s =====\n%s", cp.Servers[i].Name, s.log.String())
		}
	})
	return s
}

// fileGroup is the group that owns path.
func fileGroup(t *testing.T, path string) int {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Sys().(*syscall.Stat_t).Gid)
}
