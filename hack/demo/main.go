// Command demo brings up a real control plane (etcd and kube-apiserver on loopback), shows
// how to reach it, runs kplug's four mechanisms against it (exec credentials and their
// cache, the exec proxy, image credentials with service-account tokens, and, as root, the
// mixed version proxy between two apiservers), and shuts it down. `make demo` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kplug/kplug/test/e2e/framework"
)

func main() {
	binDir := flag.String("bin-dir", "", "directory with etcd, kube-apiserver, kubectl, kplug and kplug-demo-plugin (default: _output/bin)")
	wait := flag.Bool("wait", false, "keep the control plane running until interrupted")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *binDir, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		stop()
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "demo: next, with your own cluster: make install puts kplug and kplug-exec-cache on your PATH, and docs/getting-started/ has a page for each kind of user")
}

func run(ctx context.Context, binDir string, wait bool) error {
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "demo: "+format+"\n", args...) }
	start := time.Now()
	logf("starting etcd and kube-apiserver on loopback...")
	cp, err := framework.Start(ctx, framework.Options{BinDir: binDir, Logf: logf})
	if err != nil {
		return err
	}
	defer func() {
		logf("stopping the control plane...")
		cp.Stop()
		logf("stopped; nothing is left running")
	}()

	s := cp.Servers[0]
	fmt.Printf("kube-apiserver: %s\n", s.URL)
	fmt.Printf("admin kubeconfig (system:masters): %s\n", cp.Admin.Kubeconfig)
	fmt.Printf("token user %q: %s\n", cp.TokenUser.Name, cp.TokenUser.Kubeconfig)
	fmt.Printf("client-certificate user %q: %s\n", cp.CertUser.Name, cp.CertUser.Kubeconfig)
	fmt.Printf("files and logs (removed on stop): %s\n", cp.Dir)
	fmt.Printf("each $ command below also works pasted into another terminal in this directory, while the demo runs: its control plane and files go when it stops\n\n")
	// kubectl's discovery cache goes with the rest, not into ~/.kube/cache.
	if err := os.Setenv("KUBECACHEDIR", filepath.Join(cp.Dir, "kube-cache")); err != nil {
		return err
	}

	for _, step := range []struct {
		title string
		user  *framework.User
		args  []string
	}{
		{"who am I, as the token user", cp.TokenUser, []string{"auth", "whoami"}},
		{"namespaces, as the admin", cp.Admin, []string{"get", "namespaces"}},
	} {
		reqCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := cp.Kubectl(reqCtx, step.user, step.args...)
		fmt.Printf("$ %s\n", commandLine(cmd.Args))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			return fmt.Errorf("%s: kubectl: %w", step.title, err)
		}
		fmt.Println()
	}

	if err := execCredentialDemo(ctx, cp); err != nil {
		return err
	}
	if err := execCacheDemo(ctx, cp); err != nil {
		return err
	}
	if err := execProxyDemo(ctx, cp); err != nil {
		return err
	}
	if err := imageCredentialDemo(ctx, cp); err != nil {
		return err
	}
	if err := mixedVersionProxyDemo(ctx, cp.BinDir, logf); err != nil {
		return err
	}
	logf("all four mechanisms shown in %v", time.Since(start).Round(time.Second))

	if wait {
		fmt.Printf("export KUBECONFIG=%s\n", cp.Admin.Kubeconfig)
		logf("the control plane keeps running; press Ctrl-C to stop it")
		<-ctx.Done()
	}
	return nil
}
