package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
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
	env := append(goEnv(t), pathWith(bin), "HOME="+home, "KUBECONFIG="+kubeconfig, "XDG_CACHE_HOME="+filepath.Join(home, ".cache"))
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

// goEnv is the environment of a page's go commands, whose HOME is a directory of the
// test's: the machine's module and build caches and its module proxy settings. What the
// module cache lacks comes from the module proxy, as for a reader: on a fresh machine
// `go mod tidy` needs go.mod files of modules that building kplug never downloads.
func goEnv(t *testing.T) []string {
	t.Helper()
	vars := []string{"GOMODCACHE", "GOCACHE", "GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE"}
	out, err := exec.Command("go", append([]string{"env"}, vars...)...).Output()
	if err != nil {
		t.Fatal(err)
	}
	// go env prints one line per variable asked, in order, empty for an unset one.
	values := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(values) != len(vars) {
		t.Fatalf("go env %v printed %d lines: %q", vars, len(values), out)
	}
	env := []string{"GOFLAGS=-mod=mod -buildvcs=false"}
	for i, v := range vars {
		env = append(env, v+"="+values[i])
	}
	return env
}

// TestGettingStartedNodeIntegrator runs docs/getting-started/node-integrator.md on a
// control plane that authorizes nodes as kubeadm's does (TestDeployImageCredentialProvider
// checks the same pieces one by one): the node's kubeconfig, a pod bound to the node whose
// service account names its registry identity, the deploy config with a local registry
// and token endpoint, and the page's kplug commands and Go program, which must get the
// puller's credentials through a token the apiserver issued for the pod.
func TestGettingStartedNodeIntegrator(t *testing.T) {
	page := readDocPage(t, "docs/getting-started/node-integrator.md")
	cp := startNodeControlPlane(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := kplugBin(t, cp)
	deployDir := filepath.Join(moduleRoot(t), "deploy", "image-credential-provider")
	provider := readProviderConfig(t, filepath.Join(deployDir, "credential-provider-config.yaml")).Providers[0]

	admin := clientFor(t, cp, cp.Admin, 0)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, admin, "team")
	reg := startRegistry(t)
	ref := reg.Host + "/team/app:v1"
	reg.Push(t, ref, 512, 2)
	annotations := map[string]string{}
	for _, k := range provider.TokenAttributes.RequiredServiceAccountAnnotationKeys {
		annotations[k] = "team-a"
	}
	createPod(ctx, t, admin, "team", "app", "puller", ref, annotations)
	bindPod(ctx, t, admin, "team", "app", "node-1")
	nodeCert, err := cp.PKI.ClientCA.IssueClient("node-1-kubelet", "system:node:node-1", "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	nodeKubeconfig := writeCertKubeconfig(t, cp, cp.Servers[0].URL, "system:node:node-1", nodeCert.CertPEM, nodeCert.KeyPEM)
	exchange := startTokenExchange(t, admin, reg.PullerPassword)

	// The node's /etc/kubernetes and plugin directory.
	root := t.TempDir()
	config := filepath.Join(root, "credential-provider.yaml")
	local := readProviderConfig(t, filepath.Join(deployDir, "credential-provider-config.yaml"))
	p := &local.Providers[0]
	p.MatchImages = []string{reg.Host}
	for i, a := range p.Args {
		if strings.HasPrefix(a, "--endpoint=") {
			p.Args[i] = "--endpoint=" + exchange.url
		}
	}
	data, err := json.Marshal(local)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, config, string(data))
	adminKubeconfig := cp.Admin.Kubeconfig
	work := t.TempDir()
	out := page.run(t, work, append(goEnv(t), pathWith(bin), "HOME="+work, "KUBECONFIG="+adminKubeconfig),
		"/etc/kubernetes/credential-provider.yaml", config,
		"/usr/libexec/kubernetes/kubelet-plugins", filepath.Join(root, "plugins"),
		"/etc/kubernetes/kubelet.conf", nodeKubeconfig,
		"https://raw.githubusercontent.com/kplug/kplug/main/deploy/image-credential-provider/rbac.yaml", filepath.Join(deployDir, "rbac.yaml"),
		"registry.example/team/app:v1", ref,
		"go get github.com/kplug/kplug@latest", "go mod edit -require=github.com/kplug/kplug@v0.0.0 -replace=github.com/kplug/kplug="+moduleRoot(t),
	)
	for _, want := range []string{
		"valid (1 providers, config hash sha256:",
		"clusterrole.rbac.authorization.k8s.io/kplug-image-credential-audience created",
		fmt.Sprintf(`{"auths":{%q:{"username":"puller","password":%q,`, reg.Host, reg.PullerPassword),
		"\n" + reg.Host + "\n", // the Go program's one key
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page's output lacks %q:\n%s", want, out)
		}
	}
	// kplug and the Go program each exchanged a pod-bound token of the pod's service account.
	calls := exchange.Calls()
	if len(calls) != 2 || calls[0].User != "system:serviceaccount:team:puller" || calls[1].User != calls[0].User {
		t.Errorf("token exchanges: %+v", calls)
	}
}

// TestGettingStartedClusterOperator runs docs/getting-started/cluster-operator.md with
// two apiservers that serve different versions (the second without batch/v1, as during
// an upgrade): the page makes the peer CA and certificate with openssl and applies the
// RBAC; the test then runs the static pod's command line beside each apiserver with
// those files (the page's kubelet would); and the page's checks through the sidecar of
// the server without batch/v1 must list jobs and show a rerouted request.
func TestGettingStartedClusterOperator(t *testing.T) {
	page := readDocPage(t, "docs/getting-started/cluster-operator.md")
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("the page needs openssl: %v", err)
	}
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{
		{}, {Flags: []string{"--runtime-config=batch/v1=false"}},
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if out, err := cp.Kubectl(ctx, cp.Admin, "create", "job", "upgrade-check", "--image=registry.example/none").CombinedOutput(); err != nil {
		t.Fatalf("kubectl create job: %v\n%s", err, out)
	}
	bin := kplugBin(t, cp)
	etc := filepath.Join(t.TempDir(), "etc", "kubernetes")
	work := t.TempDir()
	env := []string{pathWith(bin), "HOME=" + work, "KUBECONFIG=" + cp.Admin.Kubeconfig}
	setup, checks := page.splitAt(t, "kubectl --server")
	kubeadmFiles(t, cp, etc) // the node's, and the kubeconfig the page makes with kubeadm
	setup.run(t, work, env,
		"/etc/kubernetes/", etc+"/",
		"https://raw.githubusercontent.com/kplug/kplug/main/docs/peerproxy-rbac.yaml", filepath.Join(moduleRoot(t), "docs", "peerproxy-rbac.yaml"))
	for _, f := range []string{"pki/apiserver.key", "pki/front-proxy-client.key", "pki/kplug/peerproxy-peer.key", "kplug-peerproxy.conf"} {
		if st, err := os.Stat(filepath.Join(etc, f)); err != nil || st.Mode().Perm() != 0o640 || fileGroup(t, filepath.Join(etc, f)) != 65532 {
			t.Errorf("after the page's steps, %s is not readable by group 65532 alone: %v", f, err)
		}
	}
	var sides []*sidecar
	for i := range cp.Servers {
		sides = append(sides, runStaticPod(t, cp, i, etc))
	}
	// The sidecar of apiserver-1 knows its peer once it has read the peer's Lease.
	admin := userClient(t, cp, cp.Admin)
	eventually(ctx, t, "jobs through the sidecar of the server without batch/v1", func() error {
		return expectStatus(ctx, admin, sides[1].URL+jobsPath, nil, http.StatusOK)
	})
	out := checks.run(t, work, env,
		"https://10.0.0.11:6444", sides[1].URL,
		"http://127.0.0.1:9444/metrics", sides[1].Metrics)
	for _, want := range []string{
		"get --raw /readyz\nok",
		"default     upgrade-check",
		"jobs                    batch/v1",
		`apiserver_rerouted_request_total{code="200",group="batch",resource="jobs",version="v1"}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page's output lacks %q:\n%s", want, out)
		}
	}
}

// TestReadmeQuickstart runs the README's quickstart as it is: make demo, in this
// checkout, which must show the four mechanisms (the mixed version proxy only as root,
// and otherwise one line saying why not).
func TestReadmeQuickstart(t *testing.T) {
	page := readDocSection(t, "README.md", "## Quickstart")
	for _, tool := range []string{"etcd", "kube-apiserver", "kubectl"} {
		framework.ToolForTest(t, tool) // make tools has run: the demo does not build them here
	}
	out := page.run(t, moduleRoot(t), nil)
	want := []string{
		"# Exec credential plugins",
		"# kplug exec-cache",
		"# Exec proxy",
		"# Image credentials (KEP-4412)",
		"pulled 127.0.0.1:",
		"# Mixed version proxy (KEP-4020)",
		"demo: stopped; nothing is left running",
	}
	if os.Geteuid() == 0 {
		want = append(want, "job.batch/hello created", "batch listed", "demo: all four mechanisms shown")
	} else {
		want = append(want, "skipped: two kube-apiservers on one machine need a UTS namespace each")
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("make demo's output lacks %q:\n%s", w, out)
		}
	}
}
