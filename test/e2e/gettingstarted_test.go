package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
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

// TestGettingStartedPluginAuthor runs docs/getting-started/plugin-author.md: a module
// that requires this checkout of kplug (in place of the release the page gets), the
// page's plugin built from its main.go, named in a kubeconfig, and run by kplug and
// kubectl against the apiserver, as the token user.
func TestGettingStartedPluginAuthor(t *testing.T) {
	page := readDocPage(t, "docs/getting-started/plugin-author.md")
	cp := framework.StartForTest(t, framework.Options{})
	bin := kplugBin(t, cp)
	home := t.TempDir()
	if err := os.Mkdir(filepath.Join(home, ".my-login"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, ".my-login", "token"), cp.TokenUser.Token+"\n")
	// A kubeconfig with the cluster my-cluster, as a reader's has theirs.
	cfg, err := clientcmd.LoadFromFile(cp.Admin.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Clusters = map[string]*clientcmdapi.Cluster{"my-cluster": cfg.Clusters[cp.Servers[0].Name]}
	cfg.Contexts = map[string]*clientcmdapi.Context{"admin": {Cluster: "my-cluster", AuthInfo: cp.Admin.Name}}
	cfg.CurrentContext = "admin"
	kubeconfig := filepath.Join(home, "config")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	gomodcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{pathWith(bin), "HOME=" + home, "KUBECONFIG=" + kubeconfig, "XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		// Offline: kplug's dependencies come from the module cache, the build cache is the machine's.
		"GOMODCACHE=" + strings.TrimSpace(string(gomodcache)), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod -buildvcs=false"}
	if dir, err := exec.Command("go", "env", "GOCACHE").Output(); err == nil {
		env = append(env, "GOCACHE="+strings.TrimSpace(string(dir)))
	}
	out := page.run(t, home, env,
		"go get github.com/kplug/kplug@latest", "go mod edit -require=github.com/kplug/kplug@v0.0.0 -replace=github.com/kplug/kplug="+moduleRoot(t))
	for _, want := range []string{
		"credential:  token\n",
		"token:       <redacted, " + fmt.Sprint(len(cp.TokenUser.Token)) + " bytes>",
		`"kind": "token"`,
		"Username    bob",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, cp.TokenUser.Token) {
		t.Error("the page printed the token")
	}
	entries, err := os.ReadDir(filepath.Join(home, ".cache", "my-login"))
	if err != nil || len(entries) == 0 {
		t.Errorf("the plugin's cache: %v, %v", entries, err)
	}
}
