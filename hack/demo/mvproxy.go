package main

import (
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
	"syscall"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/test/e2e/framework"
)

// mixedVersionProxyDemo starts a second control plane of two kube-apiservers that serve
// different versions (the second without batch/v1, as an older or newer server during an
// upgrade), a `kplug peerproxy` beside each in the documented secure setup
// (docs/mixed-version-proxy.md), and lists jobs with kubectl through the sidecar of the
// server that lacks them. It needs root, and says so otherwise.
func mixedVersionProxyDemo(ctx context.Context, binDir string, logf func(string, ...any)) error {
	fmt.Println("# Mixed version proxy (KEP-4020): a kubectl request reaches the apiserver that serves it")
	if why := whyNoSecondApiserver(); why != "" {
		fmt.Printf("skipped: two kube-apiservers on one machine need a UTS namespace each (their identity Leases are named after the hostname), and %s; run make demo as root to see it\n\n", why)
		return nil
	}
	fmt.Println("(on a control plane of its own, which stops at the end of this part: so do its $ commands)")
	logf("starting etcd and two kube-apiservers, the second with --runtime-config=batch/v1=false...")
	cp, err := framework.Start(ctx, framework.Options{BinDir: binDir, Logf: logf, Servers: []framework.ServerOptions{
		{}, {Flags: []string{"--runtime-config=batch/v1=false"}},
	}})
	if err != nil {
		return err
	}
	defer cp.Stop()
	kubeconfig, err := sidecarUser(ctx, cp)
	if err != nil {
		return err
	}
	peerCA, err := cp.PKI.NewCA("demo-peer-ca", "kplug demo peer CA")
	if err != nil {
		return err
	}
	var urls []string
	for i, s := range cp.Servers {
		url, stop, err := startPeerproxy(ctx, cp, i, kubeconfig, peerCA)
		if err != nil {
			return err
		}
		defer stop()
		urls = append(urls, url)
		fmt.Printf("kplug peerproxy beside %s (%s): %s\n", s.Name, s.URL, url)
	}
	fmt.Println()

	kubectl := filepath.Join(cp.BinDir, "kubectl")
	direct, err := viaServer(cp, cp.Servers[1].URL, "direct")
	if err != nil {
		return err
	}
	sidecar, err := viaServer(cp, urls[1], "sidecar")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", direct, "get", "jobs") //nolint:gosec // the demo's own binaries
	fmt.Printf("$ %s   # %s itself lacks batch/v1\n", commandLine(cmd.Args), cp.Servers[1].Name)
	out, err := cmd.CombinedOutput()
	fmt.Printf("%s(exit: %v)\n\n", out, err)

	// The sidecar learns its peer from its Lease within a few seconds.
	if err := waitFor(ctx, 30*time.Second, func() error {
		return exec.CommandContext(ctx, kubectl, "--kubeconfig", sidecar, "get", "jobs").Run() //nolint:gosec // the demo's own binaries
	}); err != nil {
		return fmt.Errorf("jobs through the sidecar of %s: %w", cp.Servers[1].Name, err)
	}
	fmt.Printf("through the sidecar of %s:\n", cp.Servers[1].Name)
	if err := runSteps(ctx, [][]string{
		{kubectl, "--kubeconfig", sidecar, "create", "job", "hello", "--image=registry.example/hello"},
		{kubectl, "--kubeconfig", sidecar, "get", "jobs"},
		{kubectl, "--kubeconfig", sidecar, "api-resources", "--api-group=batch"},
	}); err != nil {
		return err
	}
	for _, d := range []struct{ what, kubeconfig string }{{cp.Servers[1].Name + " itself", direct}, {"its sidecar (merged)", sidecar}} {
		groups, err := apiGroups(d.kubeconfig)
		if err != nil {
			return err
		}
		fmt.Printf("/apis from %s: %d groups, batch %s\n", d.what, len(groups), map[bool]string{true: "listed", false: "missing"}[slices.Contains(groups, "batch")])
	}
	fmt.Println()
	return nil
}

// whyNoSecondApiserver says why this machine cannot run two apiservers, or "".
func whyNoSecondApiserver() string {
	if os.Geteuid() != 0 {
		return "this demo does not run as root"
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return "unshare (util-linux) is not installed"
	}
	return ""
}

// sidecarUser applies docs/peerproxy-rbac.yaml (the namespace kplug-peerproxy, where only
// the user kplug-peerproxy writes Leases) and writes that user's kubeconfig.
func sidecarUser(ctx context.Context, cp *framework.ControlPlane) (string, error) {
	rbac := filepath.Join("docs", "peerproxy-rbac.yaml")
	cmd := cp.Kubectl(ctx, cp.Admin, "apply", "-f", rbac)
	fmt.Printf("$ %s\n", commandLine(cmd.Args))
	out, err := cmd.CombinedOutput()
	fmt.Print(string(out))
	if err != nil {
		return "", fmt.Errorf("kubectl apply -f %s: %w", rbac, err)
	}
	user, err := cp.PKI.ClientCA.IssueClient("demo-kplug-peerproxy", "kplug-peerproxy")
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server, cluster.CertificateAuthorityData = cp.Servers[0].URL, cp.PKI.ClusterCA.CertPEM
	auth := clientcmdapi.NewAuthInfo()
	auth.ClientCertificateData, auth.ClientKeyData = user.CertPEM, user.KeyPEM
	c := clientcmdapi.NewContext()
	c.Cluster, c.AuthInfo = "cluster", "kplug-peerproxy"
	cfg.Clusters["cluster"], cfg.AuthInfos["kplug-peerproxy"], cfg.Contexts["default"] = cluster, auth, c
	cfg.CurrentContext = "default"
	path := filepath.Join(cp.Dir, "kplug-peerproxy.kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// startPeerproxy runs `kplug peerproxy` beside apiserver i with a peer certificate from
// peerCA, logging to a file in cp.Dir. It returns the sidecar's URL and how to stop it.
func startPeerproxy(ctx context.Context, cp *framework.ControlPlane, i int, kubeconfig string, peerCA *framework.CA) (string, func(), error) {
	s := cp.Servers[i]
	peer, err := peerCA.Issue("peer-"+s.Name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kplug-peerproxy-" + s.Name},
		DNSNames:    []string{mvproxy.DefaultPeerServerName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return "", nil, err
	}
	port, err := freePort(ctx)
	if err != nil {
		return "", nil, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	p := cp.PKI
	logFile, err := os.Create(filepath.Join(cp.Dir, "peerproxy-"+s.Name+".log"))
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kplug"), "peerproxy", //nolint:gosec // the demo's own binary
		"--kubeconfig="+kubeconfig, "--apiserver="+s.URL, "--lease-namespace=kplug-peerproxy",
		"--listen-address="+listen, "--id=kplug-peerproxy-"+s.Name,
		"--tls-cert-file="+p.Serving.CertFile, "--tls-private-key-file="+p.Serving.KeyFile,
		"--client-ca-file="+p.ClientCA.File,
		"--requestheader-client-ca-file="+p.FrontProxyCA.File, "--requestheader-allowed-names="+framework.FrontProxyClientName,
		"--proxy-client-cert-file="+p.ProxyClient.CertFile, "--proxy-client-key-file="+p.ProxyClient.KeyFile,
		"--peer-ca-file="+peerCA.File, "--peer-tls-cert-file="+peer.CertFile, "--peer-tls-private-key-file="+peer.KeyFile,
		"--local-refresh=2s", "--peer-refresh=5s")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		_ = logFile.Close()
	}
	return "https://" + listen, stop, nil
}

// viaServer writes the admin's kubeconfig with server as its server.
func viaServer(cp *framework.ControlPlane, server, name string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(cp.Admin.Kubeconfig)
	if err != nil {
		return "", err
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	path := filepath.Join(cp.Dir, "admin-"+name+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// apiGroups lists the groups of /apis as the kubeconfig's server serves it.
func apiGroups(kubeconfig string) ([]string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, err
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, g := range groups.Groups {
		names = append(names, g.Name)
	}
	return names, nil
}

func freePort(ctx context.Context) (int, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitFor retries f until it succeeds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
