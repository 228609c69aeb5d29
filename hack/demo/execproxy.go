package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/test/e2e/framework"
)

// execProxyDemo runs unmodified kubectl through kplug's reference exec proxy, which
// authenticates to the API server with a TLS client certificate the client never sees.
func execProxyDemo(ctx context.Context, cp *framework.ControlPlane) error {
	kplug := filepath.Join(cp.BinDir, "kplug")
	kubeconfig := filepath.Join(cp.Dir, "proxy.kubeconfig")
	err := cp.WriteExecKubeconfig(kubeconfig, map[string]*clientcmdapi.ExecConfig{"proxied": {
		APIVersion:         "client.authentication.k8s.io/v1",
		Command:            kplug,
		Args:               []string{"proxy-plugin", "--client-cert", cp.CertUser.Cert.CertFile, "--client-key", cp.CertUser.Cert.KeyFile},
		ProvideClusterInfo: true,
		InteractiveMode:    clientcmdapi.NeverExecInteractiveMode,
	}})
	if err != nil {
		return err
	}
	fmt.Println("# Exec proxy: kubectl talks to a local proxy that holds the client certificate")
	kubectl := filepath.Join(cp.BinDir, "kubectl")
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, kplug, "run", "--kubeconfig", kubeconfig, "--", typed(kubectl), "auth", "whoami") //nolint:gosec // the demo's own binaries
	fmt.Printf("$ %s\n", commandLine(cmd.Args))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kplug run: %w", err)
	}
	fmt.Println()
	return nil
}
