// Command cluster keeps a control plane running on loopback for the getting-started
// pages (docs/getting-started/), until interrupted: etcd, kube-apiserver authorizing
// nodes as kubeadm's does, kube-controller-manager (the default roles' aggregation,
// service accounts, the signing of client certificates), its files laid out as kubeadm's
// /etc/kubernetes (with the CA key), a node with a pod, an OCI registry that wants a
// password and an OAuth 2.0 token endpoint for it, and, as root, a second kube-apiserver
// without batch/v1, as during an upgrade. It prints the shell lines that point a terminal
// at it. `make cluster` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kplug/kplug/test/e2e/framework"
)

// nodeFlags make the apiservers authorize kubelets as kubeadm's do: the Node authorizer
// (added to the framework's RBAC: the flag is a list) and the NodeRestriction admission
// plugin (ServiceAccountNodeAudienceRestriction).
var nodeFlags = []string{"--authorization-mode=Node", "--enable-admission-plugins=NodeRestriction"}

func main() {
	binDir := flag.String("bin-dir", "", "directory with etcd, kube-apiserver, kube-controller-manager, kubectl, kplug and kplug-exec-cache (default: _output/bin)")
	dir := flag.String("dir", "", "directory for the cluster's files, removed on stop (default: _output/cluster)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *binDir, *dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		stop()
		os.Exit(1)
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "cluster: "+format+"\n", args...) }

func run(ctx context.Context, binDir, dir string, out io.Writer) error {
	start := time.Now()
	var err error
	if binDir == "" {
		if binDir, err = framework.FindBinDir(); err != nil {
			return err
		}
	}
	if binDir, err = filepath.Abs(binDir); err != nil {
		return err
	}
	for _, b := range []string{"kube-controller-manager", "kplug", "kplug-exec-cache"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return fmt.Errorf("%s is missing from %s: run `make cluster`, which builds it: %w", b, binDir, err)
		}
	}
	if dir == "" {
		dir = filepath.Join(filepath.Dir(binDir), "cluster") // _output/cluster
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	release, err := claim(dir)
	if err != nil {
		return err
	}
	defer release()

	servers := []framework.ServerOptions{{Flags: nodeFlags}}
	if why := whyOneServer(); why != "" {
		logf("one kube-apiserver: a second (for cluster-operator.md) needs a UTS namespace of its own, and %s", why)
	} else {
		servers = append(servers, framework.ServerOptions{Flags: append([]string{"--runtime-config=batch/v1=false"}, nodeFlags...)})
	}
	logf("starting etcd and %d kube-apiserver(s) on loopback...", len(servers))
	cp, err := framework.Start(ctx, framework.Options{Dir: filepath.Join(dir, "control-plane"), BinDir: binDir, Logf: logf, Servers: servers, OneCA: true})
	if err != nil {
		return err
	}
	defer func() {
		logf("stopping...")
		cp.Stop()
	}()
	etc := filepath.Join(dir, "etc", "kubernetes")
	caKey, err := kubeadmFiles(cp, etc)
	if err != nil {
		return err
	}
	if _, err := cp.StartControllerManager(ctx, framework.ControllerManagerOptions{
		Controllers: []string{"clusterrole-aggregation-controller", "serviceaccount-controller", "certificatesigningrequest-signing-controller"},
		Flags: []string{
			"--cluster-signing-kube-apiserver-client-cert-file=" + cp.PKI.ClusterCA.File,
			"--cluster-signing-kube-apiserver-client-key-file=" + caKey,
		},
	}); err != nil {
		return err
	}
	logf("kube-controller-manager ready (%v)", time.Since(start).Round(time.Millisecond))

	// The registry logs every refused pull (level=error ... manifest unknown) through
	// logrus: into a file, not in the reader's terminal.
	regLog, err := os.Create(filepath.Join(dir, "registry.log")) //nolint:gosec // in the cluster's own directory
	if err != nil {
		return err
	}
	defer regLog.Close()
	logrus.SetOutput(regLog)
	node, err := startNode(ctx, cp, dir, etc)
	if err != nil {
		return err
	}
	defer node.Close()
	pluginDir := filepath.Join(dir, "kubelet-plugins")
	if err := os.Mkdir(pluginDir, 0o755); err != nil { //nolint:gosec // as the kubelet's plugin directory
		return err
	}
	sidecars, err := freeAddresses(ctx, len(cp.Servers))
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "# kplug's cluster for docs/getting-started: %d kube-apiserver(s), kube-controller-manager,\n", len(cp.Servers))
	fmt.Fprintf(out, "# files as kubeadm's in $KUBERNETES_DIR, node %s with pod %s, an OCI registry and its token endpoint.\n", nodeName, podRef)
	fmt.Fprintln(out, "# In another terminal, paste:")
	fmt.Fprintf(out, "export PATH=%s:\"$PATH\"\n", shellQuote(binDir))
	fmt.Fprintf(out, "export KUBECONFIG=%s\n", shellQuote(filepath.Join(etc, "admin.conf")))
	fmt.Fprintf(out, "export KUBERNETES_DIR=%s PLUGIN_DIR=%s\n", shellQuote(etc), shellQuote(pluginDir))
	fmt.Fprintf(out, "export REGISTRY=%s TOKEN_ENDPOINT=%s\n", node.Registry, node.TokenEndpoint)
	var apiservers, sidecarVars []string
	for i, s := range cp.Servers {
		apiservers = append(apiservers, fmt.Sprintf("APISERVER_%d=%s", i, s.URL))
		sidecarVars = append(sidecarVars, fmt.Sprintf("SIDECAR_%d=%s", i, sidecars[i]))
	}
	fmt.Fprintf(out, "export %s\n", strings.Join(apiservers, " "))
	fmt.Fprintf(out, "export %s\n", strings.Join(sidecarVars, " "))
	fmt.Fprintf(out, "# Ctrl-C here stops the cluster and removes %s\n", dir)
	logf("ready in %v", time.Since(start).Round(time.Second))
	<-ctx.Done()
	return nil
}

// claim makes dir the cluster's, removing what a stopped cluster left there, and refuses
// a directory another running cluster holds. release removes it.
func claim(dir string) (release func(), err error) {
	pidFile := filepath.Join(dir, "cluster.pid")
	if data, err := os.ReadFile(pidFile); err == nil { //nolint:gosec // our own file
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && alive(pid) {
			return nil, fmt.Errorf("a cluster (pid %d) already runs in %s: stop it (Ctrl-C in its terminal) first", pid, dir)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return nil, err
	}
	return func() {
		if err := os.RemoveAll(dir); err != nil {
			logf("removing %s: %v", dir, err)
			return
		}
		logf("stopped; %s removed", dir)
	}, nil
}

// whyOneServer says why this machine cannot run a second apiserver, or "".
func whyOneServer() string {
	if os.Geteuid() != 0 {
		return "this does not run as root"
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return "unshare (util-linux) is not installed"
	}
	return ""
}

// alive reports whether process pid runs (on Windows: never known, so false).
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

// freeAddresses returns n 127.0.0.1:PORT addresses nothing listens on now.
func freeAddresses(ctx context.Context, n int) ([]string, error) {
	var addrs []string
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain path characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:@%+=,-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
