package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestSecurityKubercAllowlistNotLaunderedThroughChains (issue 27, N1, found by the review
// of its first fix): the kuberc allowlist the docs recommend, real kubectl and a real
// apiserver. Each attack is a kubeconfig in a
// repository the user runs kubectl in; the planted program writes a marker and answers
// with a token the apiserver accepts. The test fails while any planted program runs.
//
//   - chain: exec-cache wrapping exec-cache. The inner one's parent is the outer
//     exec-cache, whose environment holds the exec block's env, so the "client's" PATH,
//     KUBERC and HOME it reads from /proc/<ppid>/environ are the attacker's, and kubectl's
//     --kuberc is not in the outer's argv.
//   - kplug: with `kplug` on the allowlist (the docs' alternative for `command: kplug`),
//     kplug's subcommands run programs that no policy checks.
//   - the second review of the fix: a chain deeper than CallerOf follows left the client
//     unknown, and with it the client's kuberc; proxy-plugin loaded a PKCS#11 module and
//     ran an AWS credential_process that the exec block chose.
func TestSecurityKubercAllowlistNotLaunderedThroughChains(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	dir := t.TempDir()
	bin, pluginBin := filepath.Join(dir, "bin"), filepath.Join(dir, "plugin-bin")
	buildBinary(t, bin, "./cmd/kplug-exec-cache", "kplug-exec-cache")
	buildBinary(t, bin, "./cmd/kplug", "kplug")
	buildBinary(t, pluginBin, "./test/e2e/testplugin", "aws-iam-authenticator")
	tokenFile := filepath.Join(dir, "token")
	writeBytes(t, tokenFile, []byte(cp.TokenUser.Token))

	repo := filepath.Join(dir, "repo")
	if err := os.MkdirAll(filepath.Join(repo, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "planted-ran")
	planted := "#!/bin/sh\necho \"$0 $*\" >> '" + marker + "'\n" +
		`printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}\n' "$(cat '` + tokenFile + `')"` + "\n"
	for _, p := range []string{filepath.Join(repo, "bin", "aws-iam-authenticator"), filepath.Join(repo, "planted.sh")} {
		if err := os.WriteFile(p, []byte(planted), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	shell := []string{"/bin/sh", "-c", "exec ./planted.sh"}
	// What kplug proxy-plugin loads or runs besides itself: a PKCS#11 module (its
	// constructor runs when it is loaded) and an AWS credential_process.
	plantedModule := filepath.Join(repo, "planted.so")
	if gcc, err := exec.LookPath("gcc"); err == nil {
		src := filepath.Join(dir, "planted.c")
		writeBytes(t, src, []byte("#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {\n"+
			"\tFILE *f = fopen(\""+marker+"\", \"a\");\n\tif (f) { fputs(\"planted.so loaded\\n\", f); fclose(f); }\n}\n"))
		if out, err := exec.CommandContext(t.Context(), gcc, "-shared", "-fPIC", "-o", plantedModule, src).CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
	}
	if err := os.MkdirAll(filepath.Join(repo, ".aws"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeBytes(t, filepath.Join(repo, ".aws", "config"), []byte("[default]\nregion = us-east-1\ncredential_process = "+filepath.Join(repo, "planted.sh")+"\n"))
	writeBytes(t, filepath.Join(repo, "awsconfig"), []byte("[default]\nregion = us-east-1\ncredential_process = "+filepath.Join(repo, "planted.sh")+"\n"))

	policy := func(first string) []byte {
		return []byte("apiVersion: kubectl.config.k8s.io/v1beta1\nkind: Preference\ncredentialPluginPolicy: Allowlist\ncredentialPluginAllowlist:\n" +
			"- command: " + first + "\n- command: aws-iam-authenticator\n")
	}
	kuberc, kubercKplug := filepath.Join(dir, "kuberc"), filepath.Join(dir, "kuberc-kplug")
	writeBytes(t, kuberc, policy("kplug-exec-cache"))
	writeBytes(t, kubercKplug, policy("kplug"))
	emptyHome, policyHome := filepath.Join(dir, "home-empty"), filepath.Join(dir, "home")
	for _, d := range []string{emptyHome, filepath.Join(policyHome, ".kube")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeBytes(t, filepath.Join(policyHome, ".kube", "kuberc"), policy("kplug-exec-cache")) // not the account's home
	writeBytes(t, filepath.Join(repo, "providers.yaml"), []byte("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n"+
		"- name: aws-iam-authenticator\n  matchImages: [\"*.example.com\"]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"))

	cache := filepath.Join(dir, "cache")
	ev := func(kv ...string) []clientcmdapi.ExecEnvVar {
		var out []clientcmdapi.ExecEnvVar
		for i := 0; i < len(kv); i += 2 {
			out = append(out, clientcmdapi.ExecEnvVar{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	block := func(command string, env []clientcmdapi.ExecEnvVar, args ...string) *clientcmdapi.ExecConfig {
		return &clientcmdapi.ExecConfig{APIVersion: execcred.V1, Command: command, Args: args, Env: env,
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode, ProvideClusterInfo: true}
	}
	chain := func(env []clientcmdapi.ExecEnvVar, wrapped ...string) *clientcmdapi.ExecConfig {
		return block("kplug-exec-cache", env, append([]string{"--cache-dir", cache, "--", "kplug-exec-cache", "--cache-dir", cache, "--"}, wrapped...)...)
	}
	deepChain := func(depth int, env []clientcmdapi.ExecEnvVar, wrapped ...string) *clientcmdapi.ExecConfig {
		args := []string{"--cache-dir", cache, "--"}
		for range depth - 1 {
			args = append(args, "kplug-exec-cache", "--cache-dir", cache, "--")
		}
		return block("kplug-exec-cache", env, append(args, wrapped...)...)
	}
	// The inner kubeconfig the `kplug` subcommands read: its plugin is the planted file.
	inner := filepath.Join(repo, "inner.kubeconfig")
	if err := cp.WriteExecKubeconfig(inner, map[string]*clientcmdapi.ExecConfig{"inner": block("./planted.sh", nil)}); err != nil {
		t.Fatal(err)
	}
	innerProxy := filepath.Join(repo, "proxy.kubeconfig")
	if err := cp.WriteExecKubeconfig(innerProxy, map[string]*clientcmdapi.ExecConfig{"p": block("kplug", nil, "proxy-plugin")}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(repo, "kubeconfig")
	if err := cp.WriteExecKubeconfig(kubeconfig, map[string]*clientcmdapi.ExecConfig{
		"chain-kuberc-off": chain(ev("KUBERC", "off"), shell...),
		"chain-home":       chain(ev("HOME", repo), shell...),
		"chain-noenv":      chain(nil, shell...),
		"chain-path":       chain(ev("PATH", "/proc/self/cwd/bin"), "aws-iam-authenticator", "token", "-i", "c"),
		"kplug-credential": block("kplug", ev("KUBERC", "off"), "credential", "--kubeconfig", "inner.kubeconfig"),
		"kplug-image":      block("kplug", nil, "image-credential", "get", "x.example.com/a:b", "--config", "providers.yaml", "--bin-dir", "bin"),
		"kplug-run":        block("kplug", nil, "run", "--kubeconfig", "proxy.kubeconfig", "--", "./planted.sh"),
		"chain-9":          deepChain(9, nil, shell...),
		"chain-9-kuberc":   deepChain(9, ev("KUBERC", "off"), shell...),
		"proxy-pkcs11":     block("kplug", nil, "proxy-plugin", "--client-key", "pkcs11:token=t;object=o?module-path="+plantedModule+"&pin-source=file:"+tokenFile),
		"proxy-pkcs11-env": block("kplug", ev("KPLUG_PKCS11_MODULE", plantedModule, "KPLUG_PKCS11_PIN", "1"), "proxy-plugin", "--client-key", "pkcs11:token=t;object=o"),
		"proxy-sigv4":      block("kplug", ev("AWS_CONFIG_FILE", "./awsconfig"), "proxy-plugin", "--sign", "sigv4", "--sigv4-service", "eks", "--sigv4-region", "us-east-1"),
		"proxy-sigv4-home": block("kplug", ev("HOME", repo, "AWS_CONFIG_FILE", ""), "proxy-plugin", "--sign", "sigv4", "--sigv4-service", "eks", "--sigv4-region", "us-east-1"),
	}); err != nil {
		t.Fatal(err)
	}
	userPATH := "PATH=" + bin + ":" + pluginBin + ":/usr/bin:/bin"
	kubectl := func(environ []string, args ...string) (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Env, cmd.Dir = environ, repo
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		_ = cmd.Run()
		return out.String(), errOut.String()
	}
	whoami := []string{"auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"}
	withKUBERC := func(f string) []string { return []string{userPATH, "HOME=" + emptyHome, "KUBERC=" + f} }
	for _, attack := range []struct {
		name    string
		environ []string
		args    []string
	}{
		{"chain, KUBERC=off in the exec block, policy in $KUBERC", withKUBERC(kuberc), []string{"--context", "chain-kuberc-off"}},
		{"chain, HOME in the exec block, policy in $HOME/.kube/kuberc", []string{userPATH, "HOME=" + policyHome}, []string{"--context", "chain-home"}},
		{"chain, no env at all, policy given with kubectl --kuberc", []string{userPATH, "HOME=" + emptyHome}, []string{"--kuberc", kuberc, "--context", "chain-noenv"}},
		{"chain, PATH=/proc/self/cwd/bin, policy applied", withKUBERC(kuberc), []string{"--context", "chain-path"}},
		{"kplug allowlisted: kplug credential, KUBERC=off", withKUBERC(kubercKplug), []string{"--context", "kplug-credential"}},
		{"kplug allowlisted: kplug image-credential get --bin-dir bin", withKUBERC(kubercKplug), []string{"--context", "kplug-image"}},
		{"kplug allowlisted: kplug run -- ./planted.sh", withKUBERC(kubercKplug), []string{"--context", "kplug-run"}},
		{"chain, 9 deep (the client unread), policy given with kubectl --kuberc", []string{userPATH, "HOME=" + emptyHome}, []string{"--kuberc", kuberc, "--context", "chain-9"}},
		{"chain, 9 deep, KUBERC=off, policy in $HOME/.kube/kuberc", []string{userPATH, "HOME=" + policyHome}, []string{"--context", "chain-9-kuberc"}},
		{"kplug allowlisted: proxy-plugin loads a PKCS#11 module from the repository (module-path)", withKUBERC(kubercKplug), []string{"--context", "proxy-pkcs11"}},
		{"kplug allowlisted: proxy-plugin loads a PKCS#11 module from the repository ($KPLUG_PKCS11_MODULE)", withKUBERC(kubercKplug), []string{"--context", "proxy-pkcs11-env"}},
		{"kplug allowlisted: proxy-plugin --sign sigv4, AWS_CONFIG_FILE with a credential_process", withKUBERC(kubercKplug), []string{"--context", "proxy-sigv4"}},
		{"kplug allowlisted: proxy-plugin --sign sigv4, HOME with .aws/config holding a credential_process", withKUBERC(kubercKplug), []string{"--context", "proxy-sigv4-home"}},
	} {
		_ = os.Remove(marker)
		_ = os.RemoveAll(cache)
		out, errOut := kubectl(attack.environ, append(attack.args, whoami...)...)
		if ran, _ := os.ReadFile(marker); len(ran) > 0 {
			t.Errorf("BYPASS %s: the planted program ran: %q; kubectl auth whoami: %q\nstderr: %s", attack.name, ran, out, firstLine(errOut))
			continue
		}
		t.Logf("blocked %s: %s", attack.name, firstLine(errOut))
	}
}
