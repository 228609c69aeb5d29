package framework

import (
	"bufio"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// PauseImage is the pod sandbox image of StartNode's containerd: test/e2e/testimage,
// built here and imported, never pulled.
const PauseImage = "kplug.test/pause:1"

// runcPath is Debian's runc (make deps installs it), the runtime of StartNode's containerd.
const runcPath = "/usr/sbin/runc"

// errNodeUnavailable is the error of StartNode on a machine that cannot run a node.
var errNodeUnavailable = errors.New("no node can run here")

// NodeOptions describe the node StartNode runs.
type NodeOptions struct {
	// Name is the Node's name (and the kubelet's --hostname-override). Default: kplug-node.
	Name string
	// ImageCredentialProviderConfig and ImageCredentialProviderBinDir become the kubelet's
	// --image-credential-provider-config and --image-credential-provider-bin-dir.
	ImageCredentialProviderConfig, ImageCredentialProviderBinDir string
	// RegistryHosts maps a registry host the pods name (an image's host, say
	// 123456789012.dkr.ecr.eu-west-1.amazonaws.com) to the plain-HTTP registry that serves
	// it here (127.0.0.1:PORT): containerd's hosts.toml, so that images of real registries'
	// names pull from a local one with the credentials the kubelet found for the name.
	RegistryHosts map[string]string
	// KubeletConfig is appended to the kubelet's KubeletConfiguration (YAML fields at the
	// top level), after the defaults below, e.g. "imagePullCredentialsVerificationPolicy: AlwaysVerify\n".
	KubeletConfig string
	// Logf, if set, receives progress messages.
	Logf func(format string, args ...any)
}

// Node is a kubelet of the pinned release with containerd 2 and runc, registered with the
// control plane as the Node Name, as a real node is: client certificate
// system:node:NAME in system:nodes, which the Node authorizer and NodeRestriction check
// when the apiservers run them. Pods reach it by spec.nodeName (there is no scheduler) and
// use hostNetwork (there is no CNI).
type Node struct {
	Name string
	// Dir holds the node's configuration, state and logs (short: unix socket paths are).
	Dir string
	// CRIEndpoint is containerd's socket, for crictl --runtime-endpoint.
	CRIEndpoint string
	// IP is the node's InternalIP (the kubelet's --node-ip), where the kubelet's API
	// listens, with a serving certificate of the cluster CA for it: the apiservers reach
	// it there for exec, attach, port-forward and logs.
	IP string

	cp         *ControlPlane
	containerd *process
	kubelet    *process
	kubeletArg []string
}

// StartNode starts containerd and the kubelet and waits until the Node is registered and
// ready but for its network (no CNI). It needs root (the kubelet manages cgroups and mounts) and the binaries `make
// tools` builds (kubelet, containerd, containerd-shim-runc-v2, ctr, crictl) and runc.
// Node.Stop removes every pod sandbox and container, stops both and unmounts what they
// mounted; ControlPlane.Stop stops a node still running.
func (cp *ControlPlane) StartNode(ctx context.Context, o NodeOptions) (*Node, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: the kubelet and containerd need root", errNodeUnavailable)
	}
	for _, bin := range []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "crictl"} {
		if _, err := os.Stat(filepath.Join(cp.BinDir, bin)); err != nil {
			return nil, fmt.Errorf("%w: %s is missing from %s: run `make tools`: %w", errNodeUnavailable, bin, cp.BinDir, err)
		}
	}
	if _, err := os.Stat(runcPath); err != nil {
		return nil, fmt.Errorf("%w: runc is missing: run `make deps` (Debian's runc): %w", errNodeUnavailable, err)
	}
	if o.Name == "" {
		o.Name = "kplug-node"
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	dir, err := os.MkdirTemp("", "kplug-node-")
	if err != nil {
		return nil, err
	}
	// The host's address that the kubelet would pick itself: a node IP cannot be a
	// loopback address.
	ip, err := utilnet.ChooseHostInterface()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: no address for the node's InternalIP (a loopback address cannot be one): %w", errNodeUnavailable, err)
	}
	n := &Node{Name: o.Name, Dir: dir, cp: cp, CRIEndpoint: "unix://" + filepath.Join(dir, "containerd.sock"), IP: ip.String()}
	if err := n.start(ctx, o, logf); err != nil {
		n.Stop()
		return nil, err
	}
	cp.mu.Lock()
	cp.nodes = append(cp.nodes, n)
	cp.mu.Unlock()
	return n, nil
}

func (n *Node) start(ctx context.Context, o NodeOptions, logf func(string, ...any)) error {
	start := time.Now()
	if err := n.writeContainerdConfig(o); err != nil {
		return err
	}
	env := append(os.Environ(), "PATH="+n.cp.BinDir+":"+os.Getenv("PATH"))
	var err error
	n.containerd, err = startProcessEnv("containerd", filepath.Join(n.cp.Dir, n.Name+"-containerd.log"),
		[]string{filepath.Join(n.cp.BinDir, "containerd"), "--config", filepath.Join(n.Dir, "containerd.toml")}, env)
	if err != nil {
		return err
	}
	ready := func(ctx context.Context) error {
		return n.Crictl(ctx, "info").Run()
	}
	if err := waitReady(ctx, n.containerd, 30*time.Second, ready); err != nil {
		return err
	}
	logf("containerd ready (%v)", time.Since(start).Round(time.Millisecond))

	prog, err := BuildTestImageProgram(ctx, n.Dir)
	if err != nil {
		return err
	}
	pause, err := StaticImage(prog)
	if err != nil {
		return err
	}
	if err := n.Import(ctx, PauseImage, pause); err != nil {
		return err
	}

	if err := n.writeKubeletFiles(o); err != nil {
		return err
	}
	argv := []string{filepath.Join(n.cp.BinDir, "kubelet"),
		"--config=" + filepath.Join(n.Dir, "kubelet.yaml"),
		"--kubeconfig=" + filepath.Join(n.Dir, "kubelet.kubeconfig"),
		"--root-dir=" + filepath.Join(n.Dir, "kubelet"),
		"--cert-dir=" + filepath.Join(n.Dir, "kubelet-pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP,
		"--v=2",
	}
	if o.ImageCredentialProviderConfig != "" {
		argv = append(argv, "--image-credential-provider-config="+o.ImageCredentialProviderConfig,
			"--image-credential-provider-bin-dir="+o.ImageCredentialProviderBinDir)
	}
	n.kubeletArg = argv
	if err := n.startKubelet(ctx); err != nil {
		return err
	}
	logf("kubelet registered node %s (%v)", n.Name, time.Since(start).Round(time.Millisecond))
	return nil
}

func (n *Node) startKubelet(ctx context.Context) error {
	var err error
	n.kubelet, err = startProcess("kubelet", filepath.Join(n.cp.Dir, n.Name+"-kubelet.log"), n.kubeletArg)
	if err != nil {
		return err
	}
	kubectl := filepath.Join(n.cp.BinDir, "kubectl")
	ready := func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig="+n.cp.Admin.Kubeconfig, "get", "node", n.Name,
			"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].message}`).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		// Without a CNI the node stays NotReady for its network alone, and runs
		// hostNetwork pods: anything else is a node that is not ready.
		status, message, _ := strings.Cut(string(out), " ")
		if status != "True" && !strings.HasPrefix(message, "container runtime network not ready") {
			return fmt.Errorf("node %s Ready=%s: %s", n.Name, status, message)
		}
		return nil
	}
	return waitReady(ctx, n.kubelet, 2*time.Minute, ready)
}

// RestartKubelet stops the kubelet and starts it again with the same flags (its state,
// pull records included, is kept), waiting until the node is Ready again.
func (n *Node) RestartKubelet(ctx context.Context) error {
	n.kubelet.stop(20 * time.Second)
	return n.startKubelet(ctx)
}

func (n *Node) writeContainerdConfig(o NodeOptions) error {
	certsDir := filepath.Join(n.Dir, "certs.d")
	for host, server := range o.RegistryHosts {
		d := filepath.Join(certsDir, host)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+server, "http://"+server)
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(toml), 0o600); err != nil {
			return err
		}
	}
	// Plugins this machine cannot run (or the tests need not) are disabled so that their
	// errors do not bury the ones that matter in the log.
	cfg := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs", "io.containerd.snapshotter.v1.blockfile", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[5]q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[6]q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = %[7]q
    SystemdCgroup = false
`, filepath.Join(n.Dir, "containerd-root"), filepath.Join(n.Dir, "containerd-state"),
		strings.TrimPrefix(n.CRIEndpoint, "unix://"), filepath.Join(n.Dir, "containerd.ttrpc"),
		PauseImage, certsDir, runcPath)
	if err := os.WriteFile(filepath.Join(n.Dir, "containerd.toml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	crictl := fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 10\n", n.CRIEndpoint, n.CRIEndpoint)
	return os.WriteFile(filepath.Join(n.Dir, "crictl.yaml"), []byte(crictl), 0o600)
}

func (n *Node) writeKubeletFiles(o NodeOptions) error {
	cert, err := n.cp.PKI.ClientCA.IssueClient("node-"+n.Name, "system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	u := &User{Name: "system:node:" + n.Name, Groups: []string{"system:nodes"}, Cert: cert}
	if err := writeKubeconfig(filepath.Join(n.Dir, "kubelet.kubeconfig"), n.cp.Servers[0].URL, n.cp.PKI.ClusterCA.CertPEM, u); err != nil {
		return err
	}
	serving, err := n.cp.PKI.ClusterCA.Issue("node-"+n.Name+"-serving", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:node:" + n.Name, Organization: []string{"system:nodes"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP(n.IP)},
	})
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	// failCgroupV1: false lets kubelet 1.36 run on a cgroup v1 host (this one). The
	// eviction and image GC thresholds are off: the tests' disk is a shared machine's,
	// whose free space says nothing about the node under test. The kubelet's own API
	// listens on the node's IP, where the apiservers reach it, and lets in any client of
	// the client CA (the apiservers' kubelet client certificate among them): no test
	// needs a kubelet authorization policy.
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: %[1]s
address: %[7]s
port: %[2]d
tlsCertFile: %[8]s
tlsPrivateKeyFile: %[9]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[4]s
authorization:
  mode: AlwaysAllow
failSwapOn: false
resolvConf: /etc/resolv.conf
podLogsDir: %[5]s
evictionHard:
  memory.available: "0%%"
  nodefs.available: "0%%"
  imagefs.available: "0%%"
  nodefs.inodesFree: "0%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 2s
%[6]s`, n.CRIEndpoint, ports[0], ports[1], n.cp.PKI.ClientCA.File, filepath.Join(n.Dir, "pod-logs"), o.KubeletConfig,
		n.IP, serving.CertFile, serving.KeyFile)
	return os.WriteFile(filepath.Join(n.Dir, "kubelet.yaml"), []byte(cfg), 0o600)
}

// Crictl returns crictl of the pinned cri-tools against the node's containerd (its
// configuration file, crictl.yaml in Dir, names the socket).
func (n *Node) Crictl(ctx context.Context, args ...string) *exec.Cmd {
	args = append([]string{"--config", filepath.Join(n.Dir, "crictl.yaml")}, args...)
	return exec.CommandContext(ctx, filepath.Join(n.cp.BinDir, "crictl"), args...)
}

// Import puts img into the node's containerd as ref (in the k8s.io namespace, where the
// kubelet sees it), as `ctr images import` of a tarball does: a preloaded image.
func (n *Node) Import(ctx context.Context, ref string, img ggcrv1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	file := filepath.Join(n.Dir, "import.tar")
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		return err
	}
	defer os.Remove(file)
	cmd := exec.CommandContext(ctx, filepath.Join(n.cp.BinDir, "ctr"), "--address", strings.TrimPrefix(n.CRIEndpoint, "unix://"),
		"--namespace", "k8s.io", "images", "import", file)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import %s: %w: %s", ref, err, b)
	}
	return nil
}

// KubeletLog is the kubelet's output so far.
func (n *Node) KubeletLog() string {
	b, _ := os.ReadFile(filepath.Join(n.cp.Dir, n.Name+"-kubelet.log"))
	return string(b)
}

// Logs is the last lines of the kubelet's and containerd's logs, for a failed test.
func (n *Node) Logs(lines int) string {
	var b strings.Builder
	for _, p := range []*process{n.kubelet, n.containerd} {
		if p != nil {
			fmt.Fprintf(&b, "--- %s (%s)\n%s\n", p.name, p.logPath, p.tail(lines))
		}
	}
	return b.String()
}

// Stop stops the kubelet, removes every pod sandbox (and so every container and shim),
// stops containerd, unmounts what is still mounted under the node's directory and
// removes it. It is safe to call twice.
func (n *Node) Stop() {
	if n.kubelet != nil {
		n.kubelet.stop(20 * time.Second)
	}
	if n.containerd != nil && n.containerd.running() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = n.Crictl(ctx, "rmp", "--all", "--force").Run()
		cancel()
		n.containerd.stop(20 * time.Second)
	}
	killShims(n.Dir)
	unmountUnder(n.Dir)
	removeKubeletCgroups()
	_ = os.RemoveAll(n.Dir)
}

// killShims kills containerd shims (and so their containers) started for the node at dir,
// should removing the pods have left any: they run in their own sessions, outside the
// process group of containerd.
func killShims(dir string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "containerd-shim-runc-v2" && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, dir) }) {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	}
}

// unmountUnder unmounts, deepest first, every mount point under dir (overlays of
// containers, the kubelet's volumes), so that removing dir never reaches into a mount.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	_ = f.Close()
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = exec.Command("umount", "-l", p).Run() //nolint:noctx // cleanup, no context
	}
}

// removeKubeletCgroups removes the kubepods cgroups the kubelet made, now empty, in every
// cgroup v1 hierarchy, deepest first.
func removeKubeletCgroups() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	}
}
