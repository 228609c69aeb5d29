package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// kubectlDir is a directory with the pinned kubectl, for a reader's PATH: a reader of a
// page has kubectl.
func kubectlDir(t *testing.T, cp *framework.ControlPlane) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(cp.BinDir, "kubectl"), filepath.Join(dir, "kubectl")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readerHome is the home directory of a page's reader who has the tools cached: empty but
// for this machine's Go module and build caches, linked where the go command looks by
// default (~/go/pkg/mod, ~/.cache/go-build), so that the page's go commands download and
// compile only what a reader's would. No go env file: the page's go commands run with Go's
// defaults.
func readerHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	caches := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, link := range []string{filepath.Join(home, "go", "pkg", "mod"), filepath.Join(home, ".cache", "go-build")} {
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(caches[i], link); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

// readerEnv is the whole environment of a reader's shell: HOME, and a PATH of dirs (what
// the page assumes the reader has, such as kubectl), the go command's directory and the
// system's; and the machine's network settings, if the test has any (a reader's machine
// has its own). It fails the test when kplug is on that PATH already: the page installs it.
func readerEnv(t *testing.T, home string, dirs ...string) []string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	path := append(dirs, filepath.Dir(goCmd), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
	for _, dir := range path {
		for _, prog := range []string{"kplug", "kplug-exec-cache"} {
			if _, err := os.Stat(filepath.Join(dir, prog)); err == nil {
				t.Fatalf("%s is on the reader's PATH before the page installs it: remove it", filepath.Join(dir, prog))
			}
		}
	}
	env := []string{"HOME=" + home, "PATH=" + strings.Join(path, string(os.PathListSeparator))}
	for _, name := range []string{"TMPDIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "GOPROXY", "GOSUMDB", "GONOSUMDB", "GONOPROXY", "GOPRIVATE"} {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// installReplacements stand for a clone of kplug in the pages' install step: this checkout.
func installReplacements(t *testing.T) []string {
	return []string{"git clone https://github.com/kplug/kplug.git ~/kplug", fmt.Sprintf("ln -s %q ~/kplug", moduleRoot(t))}
}

// checkInstalled checks that the page's make install put kplug and kplug-exec-cache in
// ~/go/bin and said, in the line the page then runs, that ~/go/bin is not on PATH.
func checkInstalled(t *testing.T, home, out string) {
	t.Helper()
	bin := filepath.Join(home, "go", "bin")
	for _, want := range []string{
		"installed kplug and kplug-exec-cache in " + bin + "\n",
		"make install: " + bin + ` is not on your PATH; add it (in ~/.profile too, to keep it): export PATH="$PATH:` + bin + `"` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page's make install did not print %q:\n%s", want, out)
		}
	}
	for _, prog := range []string{"kplug", "kplug-exec-cache"} {
		if st, err := os.Stat(filepath.Join(bin, prog)); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("%s after make install: %v", prog, err)
		}
	}
}

// TestGettingStartedKubectlUser runs docs/getting-started/kubectl-user.md as a reader
// whose kubeconfig (~/.kube/config) has a user "prod" whose plugin, slow-login, takes a
// second: the page installs kplug with make install, and its kubectl commands run the
// plugin once before the cache and once through it.
func TestGettingStartedKubectlUser(t *testing.T) {
	page := readDocPage(t, "docs/getting-started/kubectl-user.md")
	cp := framework.StartForTest(t, framework.Options{})
	grantView(t, cp, cp.TokenUser.Name)
	// The reader has kubectl and their plugin.
	tools := kubectlDir(t, cp)
	buildBinary(t, tools, "./test/e2e/testplugin", "slow-login")
	// The plugin's token, and its record of runs, out of the reader's home.
	state := t.TempDir()
	tokenFile, counts := filepath.Join(state, "token"), filepath.Join(state, "runs")
	writeFile(t, tokenFile, cp.TokenUser.Token)
	home := readerHome(t)
	if err := os.Mkdir(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	err := cp.WriteExecKubeconfig(filepath.Join(home, ".kube", "config"), map[string]*clientcmdapi.ExecConfig{"prod": {
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
	out := page.runAsReader(t, home, readerEnv(t, home, tools), installReplacements(t)...)

	checkInstalled(t, home, out)
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
	// The page's cache: where kplug-exec-cache keeps it by default, emptied by --clear.
	if entries, _ := filepath.Glob(filepath.Join(home, ".cache", "kplug", "exec-cache", "*.json")); len(entries) != 0 {
		t.Errorf("after --clear, %d cache entries are left", len(entries))
	}
}

// TestGettingStartedPluginAuthor runs docs/getting-started/plugin-author.md as a reader
// whose kubeconfig (~/.kube/config) has the cluster my-cluster and an admin context: the
// page installs kplug, builds its plugin in a module that requires this checkout of kplug
// (a replace directive in place of the release the page gets), names it in the
// kubeconfig, logs in with a service account's token it creates, and runs it with kplug
// and kubectl against the apiserver.
func TestGettingStartedPluginAuthor(t *testing.T) {
	page := readDocPage(t, "docs/getting-started/plugin-author.md")
	cp := framework.StartForTest(t, framework.Options{})
	tools := kubectlDir(t, cp)
	home := readerHome(t)
	// The reader's kubeconfig: their cluster, my-cluster, as the admin.
	cfg, err := clientcmd.LoadFromFile(cp.Admin.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Clusters = map[string]*clientcmdapi.Cluster{"my-cluster": cfg.Clusters[cp.Servers[0].Name]}
	cfg.Contexts = map[string]*clientcmdapi.Context{"admin": {Cluster: "my-cluster", AuthInfo: cp.Admin.Name}}
	cfg.CurrentContext = "admin"
	if err := os.Mkdir(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(*cfg, filepath.Join(home, ".kube", "config")); err != nil {
		t.Fatal(err)
	}
	out := page.runAsReader(t, home, readerEnv(t, home, tools), append(installReplacements(t),
		"go get github.com/kplug/kplug@latest", "go mod edit -require=github.com/kplug/kplug@v0.0.0 -replace=github.com/kplug/kplug="+moduleRoot(t))...)

	checkInstalled(t, home, out)
	token, err := os.ReadFile(filepath.Join(home, ".my-login", "token"))
	if err != nil {
		t.Fatalf("the page's login: %v", err)
	}
	for _, want := range []string{
		"credential:  token\n",
		"token:       <redacted, " + fmt.Sprint(len(strings.TrimSpace(string(token)))) + " bytes>",
		`"kind": "token"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page's output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`\nUsername +system:serviceaccount:default:my-login-test\n`).MatchString(out) {
		t.Errorf("kubectl auth whoami through the plugin is not the page's service account:\n%s", out)
	}
	if strings.Contains(out, strings.TrimSpace(string(token))) {
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
	want = append(want,
		"each $ command below also works pasted into another terminal in this directory, while the demo runs",
		"demo: next, with your own cluster: make install puts kplug and kplug-exec-cache on your PATH")
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("make demo's output lacks %q:\n%s", w, out)
		}
	}
	checkDemoOutput(t, out)
}

// checkDemoOutput holds make demo's output to what a newcomer can trust: no log line of
// a component that reads like an error of the demo's (the in-process registry logs to a
// file), and each command it prints ("$ ...") names a program that a shell in the clone
// finds as printed (kubectl and kplug by their path in _output/bin, not on PATH).
func checkDemoOutput(t *testing.T, out string) {
	t.Helper()
	for line := range strings.Lines(out) {
		if strings.Contains(line, "level=error") || strings.Contains(line, "level=warning") {
			t.Errorf("make demo printed a component's log line: %s", line)
		}
		cmdline, ok := strings.CutPrefix(line, "$ ")
		if !ok {
			continue
		}
		prog := strings.Fields(cmdline)[0]
		if strings.Contains(prog, "/") {
			if !filepath.IsAbs(prog) {
				prog = filepath.Join(moduleRoot(t), prog)
			}
			if _, err := os.Stat(prog); err != nil {
				t.Errorf("make demo printed %q, whose program is not there: %v", strings.TrimSpace(line), err)
			}
		} else if prog != "cat" {
			t.Errorf("make demo printed %q, whose program a shell finds only on PATH", strings.TrimSpace(line))
		}
	}
}
