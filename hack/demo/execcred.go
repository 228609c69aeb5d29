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
	return runSteps(ctx, [][]string{
		{kplug, "credential", "--kubeconfig", kubeconfig},
		{filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig", kubeconfig, "auth", "whoami"},
		{kplug, "request", "--kubeconfig", kubeconfig, "/version"},
	})
}

// execCacheDemo wraps a slow plugin in `kplug exec-cache`: three kubectl commands, one
// plugin run.
func execCacheDemo(ctx context.Context, cp *framework.ControlPlane) error {
	tokenFile, countFile := filepath.Join(cp.Dir, "demo-token"), filepath.Join(cp.Dir, "demo-runs")
	cacheDir := filepath.Join(cp.Dir, "exec-cache")
	kplug := filepath.Join(cp.BinDir, "kplug")
	kubeconfig := filepath.Join(cp.Dir, "exec-cache.kubeconfig")
	err := cp.WriteExecKubeconfig(kubeconfig, map[string]*clientcmdapi.ExecConfig{"demo": {
		APIVersion: "client.authentication.k8s.io/v1",
		Command:    kplug,
		Args:       []string{"exec-cache", "--cache-dir", cacheDir, "--", filepath.Join(cp.BinDir, "kplug-demo-plugin")},
		Env: []clientcmdapi.ExecEnvVar{
			{Name: "TEST_TOKEN_FILE", Value: tokenFile},
			{Name: "TEST_COUNT_FILE", Value: countFile},
			{Name: "TEST_SLEEP", Value: "1s"}, // as slow as a real login
		},
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}})
	if err != nil {
		return err
	}
	fmt.Println("# kplug exec-cache: any plugin's answer shared by every kubectl run (this plugin takes 1 s)")
	kubectl := filepath.Join(cp.BinDir, "kubectl")
	whoami := []string{kubectl, "--kubeconfig", kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"}
	if err := runSteps(ctx, [][]string{whoami, whoami, whoami, {kplug, "exec-cache", "--cache-dir", cacheDir, "--list"}}); err != nil {
		return err
	}
	runs, err := os.ReadFile(countFile) //nolint:gosec // the demo's own file
	if err != nil {
		return err
	}
	fmt.Printf("the plugin ran %d time(s) for 3 kubectl commands\n\n", len(runs))
	return nil
}

// runSteps runs each command, echoing it first, with its output on the demo's.
func runSteps(ctx context.Context, steps [][]string) error {
	for _, step := range steps {
		fmt.Printf("$ %s\n", commandLine(step))
		runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(runCtx, step[0], step[1:]...) //nolint:gosec // the demo's own binaries
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		start := time.Now()
		err := cmd.Run()
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(step[0]), err)
		}
		fmt.Printf("\n(%v)\n\n", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// commandLine is argv as a reader pastes it into a shell in the directory the demo runs in
// (make demo runs it in the clone): the program by its path from there (_output/bin/kplug:
// kplug is on PATH only after make install), each argument quoted when a shell would
// change it.
func commandLine(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		if i == 0 {
			a = typed(a)
		}
		words[i] = shellQuote(a)
	}
	return strings.Join(words, " ")
}

// typed is path relative to the working directory when it is below it, else path.
func typed(path string) string {
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, path); err == nil && filepath.IsLocal(rel) {
			return rel
		}
	}
	return path
}

// shellQuote is s as one shell word: as it is when no character in it is special to a
// shell, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
