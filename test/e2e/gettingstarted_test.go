package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/test/e2e/framework"
)

// kplugBin builds kplug and kplug-exec-cache into a directory of the test's and links the
// pinned kubectl there, for a page's PATH.
func kplugBin(t *testing.T, cp *framework.ControlPlane) string {
	t.Helper()
	bin := t.TempDir()
	buildBinary(t, bin, "./cmd/kplug", "kplug")
	buildBinary(t, bin, "./cmd/kplug-exec-cache", "kplug-exec-cache")
	if err := os.Symlink(filepath.Join(cp.BinDir, "kubectl"), filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	return bin
}

// grantView lets user read pods, as most users of a cluster may. (The built-in view role
// is empty here: kube-controller-manager aggregates it.)
func grantView(t *testing.T, cp *framework.ControlPlane, user string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"create", "clusterrole", "pod-reader", "--verb=get,list,watch", "--resource=pods"},
		{"create", "clusterrolebinding", user + "-pod-reader", "--clusterrole=pod-reader", "--user=" + user},
	} {
		if out, err := cp.Kubectl(ctx, cp.Admin, args...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
}

// TestGettingStartedKubectlUser runs docs/getting-started/kubectl-user.md with a user
// "prod" whose plugin, slow-login, takes a second: the page's kubectl commands run it
// once before the cache and once through it.
func TestGettingStartedKubectlUser(t *testing.T) {
	page := readDocPage(t, "docs/getting-started/kubectl-user.md")
	cp := framework.StartForTest(t, framework.Options{})
	grantView(t, cp, cp.TokenUser.Name)
	bin := kplugBin(t, cp)
	buildBinary(t, bin, "./test/e2e/testplugin", "slow-login")
	home := t.TempDir()
	tokenFile, counts := filepath.Join(home, "token"), filepath.Join(home, "runs")
	writeFile(t, tokenFile, cp.TokenUser.Token)
	kubeconfig := filepath.Join(home, "config")
	err := cp.WriteExecKubeconfig(kubeconfig, map[string]*clientcmdapi.ExecConfig{"prod": {
		APIVersion: execcred.V1,
		Command:    "slow-login",
		Args:       []string{"get-token", "--cluster", "prod"},
		Env: []clientcmdapi.ExecEnvVar{
			{Name: "TEST_TOKEN_FILE", Value: tokenFile},
			{Name: "TEST_COUNT_FILE", Value: counts},
			{Name: "TEST_SLEEP", Value: "1s"},
		},
		InteractiveMode: clientcmdapi.IfAvailableExecInteractiveMode,
	}})
	if err != nil {
		t.Fatal(err)
	}
	out := page.run(t, home, []string{pathWith(bin), "HOME=" + home, "KUBECONFIG=" + kubeconfig, "KUBECACHEDIR=" + filepath.Join(home, "cache")})

	if runs, _ := os.ReadFile(counts); len(runs) != 2 {
		t.Errorf("slow-login ran %d times for the page's three kubectl get pods; want 2 (one before the cache, one through it)", len(runs))
	}
	for _, want := range []string{
		"prod: slow-login [\"get-token\",\"--cluster\",\"prod\"]",
		"prod: kplug-exec-cache [\"--\",\"slow-login\",\"get-token\",\"--cluster\",\"prod\"]",
		"credential:  token",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, cp.TokenUser.Token) {
		t.Error("the page printed the token")
	}
	if entries, _ := filepath.Glob(filepath.Join(home, "cache", "kplug", "exec-cache", "*.json")); len(entries) != 0 {
		t.Errorf("after --clear, %d cache entries are left", len(entries))
	}
}
