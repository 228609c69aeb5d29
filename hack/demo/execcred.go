package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/test/e2e/framework"
)

// execCredentialDemo writes a kubeconfig whose user gets its token from an exec credential
// plugin (written with kplug's SDK), then shows the credential with kplug and uses it with
// kubectl and kplug request.
func execCredentialDemo(ctx context.Context, cp *framework.ControlPlane) error {
	tokenFile := filepath.Join(cp.Dir, "demo-token")
	if err := os.WriteFile(tokenFile, []byte(cp.TokenUser.Token), 0o600); err != nil {
		return err
	}
	kubeconfig := filepath.Join(cp.Dir, "exec.kubeconfig")
	err := cp.WriteExecKubeconfig(kubeconfig, map[string]*clientcmdapi.ExecConfig{"demo": {
		APIVersion:      "client.authentication.k8s.io/v1",
		Command:         filepath.Join(cp.BinDir, "kplug-demo-plugin"),
		Env:             []clientcmdapi.ExecEnvVar{{Name: "TEST_TOKEN_FILE", Value: tokenFile}},
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}})
	if err != nil {
		return err
	}

	fmt.Println("# Exec credential plugins: a kubeconfig user whose token comes from a plugin")
	kplug := filepath.Join(cp.BinDir, "kplug")
	for _, step := range [][]string{
		{kplug, "credential", "--kubeconfig", kubeconfig},
		{filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig", kubeconfig, "auth", "whoami"},
		{kplug, "request", "--kubeconfig", kubeconfig, "/version"},
	} {
		fmt.Printf("$ %s %s\n", filepath.Base(step[0]), strings.Join(step[1:], " "))
		runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(runCtx, step[0], step[1:]...) //nolint:gosec // the demo's own binaries
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(step[0]), err)
		}
		fmt.Println()
	}
	return nil
}
