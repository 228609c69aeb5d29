package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestSecurityKubercAllowlistNotLaunderedThroughExecCache (issue 27, N1): with the
// allowlist docs/exec-credentials.md recommends (kplug-exec-cache and
// aws-iam-authenticator), real kubectl allows the exec block's command, kplug-exec-cache,
// and everything after -- is exec-cache's to police. A kubeconfig shipped in a repository
// beside its own ./aws-iam-authenticator tried four ways to run a file the user never
// allowed; each planted program writes a marker file when it runs. None may run:
//
//   - (a) ./aws-iam-authenticator and bin/../aws-iam-authenticator clean to the allowed
//     name, and where that name was not installed, ran from the working directory;
//   - (b) the exec block's env PATH chose which file the allowed name was;
//   - (c) the exec block's env KUBERC=off, KUBECTL_KUBERC=false or HOME dropped the policy
//     kubectl applies from $KUBERC, and kubectl's --kuberc never reached exec-cache;
//   - (d) with HOME not the account's home (containers, sudo -E, CI), KUBERC=off dropped
//     the policy kubectl applies from $HOME/.kube/kuberc.
//
// The allowed plugin keeps working through exec-cache, so the refusals are not a broken setup.
func TestSecurityKubercAllowlistNotLaunderedThroughExecCache(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	dir := t.TempDir()
	// The user's PATH: kplug-exec-cache, and the real plugin in a directory of its own,
	// which some users do not have on PATH (the plugin is not installed).
	bin, pluginBin := filepath.Join(dir, "bin"), filepath.Join(dir, "plugin-bin")
	buildBinary(t, bin, "./cmd/kplug-exec-cache", "kplug-exec-cache")
	buildBinary(t, pluginBin, "./test/e2e/testplugin", "aws-iam-authenticator")
	tokenFile := filepath.Join(dir, "token")
	writeBytes(t, tokenFile, []byte(cp.TokenUser.Token))

	// The repository: the kubeconfig's author's directory, with its own plugin.
	repo := filepath.Join(dir, "repo")
	if err := os.MkdirAll(filepath.Join(repo, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "planted-ran")
	planted := "#!/bin/sh\necho \"$0 $*\" >> '" + marker + "'\n" +
		`echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"planted"}}'` + "\n"
	if err := os.WriteFile(filepath.Join(repo, "aws-iam-authenticator"), []byte(planted), 0o700); err != nil {
		t.Fatal(err)
	}
	shell := []string{"/bin/sh", "-c", "echo shell >> '" + marker + "'; echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"planted\"}}'"}

	policy := []byte("apiVersion: kubectl.config.k8s.io/v1beta1\nkind: Preference\ncredentialPluginPolicy: Allowlist\ncredentialPluginAllowlist:\n" +
		"- command: kplug-exec-cache\n- command: aws-iam-authenticator\n")
	kuberc := filepath.Join(dir, "kuberc")
	writeBytes(t, kuberc, policy)
	emptyHome, policyHome := filepath.Join(dir, "home-empty"), filepath.Join(dir, "home")
	for _, d := range []string{emptyHome, filepath.Join(policyHome, ".kube")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeBytes(t, filepath.Join(policyHome, ".kube", "kuberc"), policy)

	cache := filepath.Join(dir, "cache")
	block := func(env []clientcmdapi.ExecEnvVar, wrapped ...string) *clientcmdapi.ExecConfig {
		return &clientcmdapi.ExecConfig{
			APIVersion:      execcred.V1,
			Command:         "kplug-exec-cache",
			Args:            append([]string{"--cache-dir", cache, "--"}, wrapped...),
			Env:             append([]clientcmdapi.ExecEnvVar{{Name: "TEST_TOKEN_FILE", Value: tokenFile}}, env...),
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}
	}
	env := func(name, value string) []clientcmdapi.ExecEnvVar {
		return []clientcmdapi.ExecEnvVar{{Name: name, Value: value}}
	}
	kubeconfig := filepath.Join(repo, "kubeconfig")
	if err := cp.WriteExecKubeconfig(kubeconfig, map[string]*clientcmdapi.ExecConfig{
		"allowed":        block(nil, "aws-iam-authenticator", "token", "-i", "c"),
		"dot":            block(nil, "./aws-iam-authenticator", "token", "-i", "c"),
		"dotdot":         block(nil, "bin/../aws-iam-authenticator", "token", "-i", "c"),
		"path":           block(env("PATH", repo), "aws-iam-authenticator", "token", "-i", "other"), // not the allowed context's cache entry
		"kuberc-off":     block(env("KUBERC", "off"), shell...),
		"kubectl-kuberc": block(env("KUBECTL_KUBERC", "false"), shell...),
		"home":           block(env("HOME", repo), shell...),
	}); err != nil {
		t.Fatal(err)
	}

	userPATH := "PATH=" + bin + ":" + pluginBin + ":/usr/bin:/bin"
	notInstalled := []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + emptyHome, "KUBERC=" + kuberc}
	kubectl := func(environ []string, args ...string) (string, string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Env, cmd.Dir = environ, repo // the user works in the repository
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	whoami := []string{"auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"}
	withKUBERC := []string{userPATH, "HOME=" + emptyHome, "KUBERC=" + kuberc}
	withHome := []string{userPATH, "HOME=" + policyHome} // not the account's home (/etc/passwd)

	if out, errOut, err := kubectl(withKUBERC, append([]string{"--context", "allowed"}, whoami...)...); err != nil || out != cp.TokenUser.Name {
		t.Fatalf("the allowed plugin through exec-cache: %q, %v\n%s", out, err, errOut)
	}
	// kubectl itself refuses the planted file named directly.
	_, errOut, err := kubectl(withKUBERC, "--kubeconfig", writeDirect(t, cp, repo), "--context", "direct", "auth", "whoami")
	if err == nil || !strings.Contains(errOut, `plugin path "`+filepath.Join(repo, "aws-iam-authenticator")+`" is not permitted by the credential plugin allowlist`) {
		t.Fatalf("kubectl with the planted plugin named directly: %v\n%s", err, errOut)
	}

	// (b): the allowed name is the file in the user's PATH, whatever the exec block's PATH.
	out, errOut, err := kubectl(withKUBERC, append([]string{"--context", "path"}, whoami...)...)
	if ran, _ := os.ReadFile(marker); err != nil || out != cp.TokenUser.Name || len(ran) > 0 {
		t.Errorf("(b) PATH in the exec block: kubectl %q, %v\nstderr: %s\nthe planted program ran: %q; want the allowed plugin's answer", out, err, errOut, ran)
		_ = os.Remove(marker)
	}

	for _, attack := range []struct {
		name    string
		environ []string
		args    []string
	}{
		{"(a) ./aws-iam-authenticator, the plugin not installed", notInstalled, []string{"--context", "dot"}},
		{"(a) bin/../aws-iam-authenticator, the plugin not installed", notInstalled, []string{"--context", "dotdot"}},
		{"(a) ./aws-iam-authenticator, the plugin installed", withKUBERC, []string{"--context", "dot"}},
		{"(c) KUBERC=off in the exec block", withKUBERC, []string{"--context", "kuberc-off"}},
		{"(c) KUBECTL_KUBERC=false in the exec block", withKUBERC, []string{"--context", "kubectl-kuberc"}},
		{"(c) HOME in the exec block", withKUBERC, []string{"--context", "home"}},
		{"(c) kubectl --kuberc, KUBERC=off in the exec block", []string{userPATH, "HOME=" + emptyHome}, []string{"--kuberc", kuberc, "--context", "kuberc-off"}},
		{"(d) HOME not the account's, KUBERC=off in the exec block", withHome, []string{"--context", "kuberc-off"}},
		{"(d) HOME not the account's, HOME in the exec block", withHome, []string{"--context", "home"}},
	} {
		out, errOut, err := kubectl(attack.environ, append(attack.args, whoami...)...)
		ran, _ := os.ReadFile(marker)
		if err == nil || out != "" || !strings.Contains(errOut, "does not allow the wrapped plugin") || len(ran) > 0 {
			t.Errorf("%s: kubectl %q, %v\nstderr: %s\nthe planted program ran: %q", attack.name, out, err, errOut, ran)
			_ = os.Remove(marker)
			continue
		}
		t.Logf("%s: %s", attack.name, firstLine(errOut))
	}
}

// writeDirect writes a kubeconfig whose exec block names the planted plugin itself, as a
// relative command, which clientcmd anchors at the kubeconfig's directory.
func writeDirect(t *testing.T, cp *framework.ControlPlane, repo string) string {
	t.Helper()
	path := filepath.Join(repo, "direct.kubeconfig")
	if err := cp.WriteExecKubeconfig(path, map[string]*clientcmdapi.ExecConfig{
		"direct": {APIVersion: execcred.V1, Command: "./aws-iam-authenticator", InteractiveMode: clientcmdapi.NeverExecInteractiveMode},
	}); err != nil {
		t.Fatal(err)
	}
	return path
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
