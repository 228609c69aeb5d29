package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/test/e2e/framework"
)

// kplugBin builds kplug, kplug-exec-cache and kplug-proxy-plugin into a directory of the
// test's and links the pinned kubectl there, for a page's PATH.
func kplugBin(t *testing.T, cp *framework.ControlPlane) string {
	t.Helper()
	bin := t.TempDir()
	buildKplug(t, bin)
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
		for _, prog := range []string{"kplug", "kplug-exec-cache", "kplug-proxy-plugin"} {
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

// checkInstalled checks that the page's make install put kplug, kplug-exec-cache and
// kplug-proxy-plugin in ~/go/bin and said, in the line the page then runs, that ~/go/bin
// is not on PATH.
func checkInstalled(t *testing.T, home, out string) {
	t.Helper()
	bin := filepath.Join(home, "go", "bin")
	for _, want := range []string{
		"installed kplug, kplug-exec-cache and kplug-proxy-plugin in " + bin + "\n",
		"make install: " + bin + ` is not on your PATH; add it (in ~/.profile too, to keep it): export PATH="$PATH:` + bin + `"` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page's make install did not print %q:\n%s", want, out)
		}
	}
	for _, prog := range []string{"kplug", "kplug-exec-cache", "kplug-proxy-plugin"} {
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

// cluster is `make cluster` running for a test: what it printed for a reader to paste.
type cluster struct {
	exports string // its export lines
	proc    *framework.Process
}

// startCluster runs the program `make cluster` runs (hack/cluster) with this checkout's
// kplug and kplug-exec-cache and the pinned tools, in a directory of the test's, until the
// test ends, and returns once it has printed its export lines.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	tools, err := framework.FindBinDir()
	if err != nil {
		if os.Getenv(framework.RequireEnv) != "" {
			t.Fatal(err)
		}
		t.Skipf("skipping end-to-end test: %v", err)
	}
	bin := t.TempDir()
	buildKplug(t, bin)
	buildBinary(t, bin, "./cmd/kplug-exec-cache", "kplug-exec-cache")
	for _, tool := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"} {
		if err := os.Symlink(filepath.Join(tools, tool), filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	program := buildBinary(t, t.TempDir(), "./hack/cluster", "cluster")
	work := t.TempDir()
	proc, err := framework.StartCommand("cluster", filepath.Join(work, "cluster.log"),
		[]string{program, "--bin-dir", bin, "--dir", filepath.Join(work, "cluster")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proc.Stop(30 * time.Second)
		if t.Failed() {
			t.Logf("===== make cluster =====\n%s", proc.Tail(80))
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		log := proc.Tail(200)
		if strings.Contains(log, "# Ctrl-C here stops the cluster") {
			var exports []string
			for _, line := range strings.Split(log, "\n") {
				if strings.HasPrefix(line, "export ") {
					exports = append(exports, line)
				}
			}
			return &cluster{exports: strings.Join(exports, "\n") + "\n", proc: proc}
		}
		select {
		case <-proc.Done():
			t.Fatalf("make cluster exited: %v\n%s", proc.Err(), log)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("make cluster printed no export lines in 3 minutes:\n%s", log)
		}
	}
}

// after is the page run after the cluster's export lines, as a reader pastes them into
// the terminal where they then follow the page.
func (c *cluster) after(page docPage) docPage {
	return docPage{path: page.path, parts: append([]string{"# the export lines make cluster printed\n" + c.exports}, page.parts...), skipped: page.skipped}
}

// value is the value of the variable name in the cluster's export lines.
func (c *cluster) value(t *testing.T, name string) string {
	t.Helper()
	for _, f := range strings.Fields(c.exports) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	t.Fatalf("make cluster exports no %s:\n%s", name, c.exports)
	return ""
}

// noGoFlags is the environment of a page's go commands without the GOFLAGS goEnv sets:
// the machine's Go caches and proxy, as a reader's go has them, and nothing else.
func noGoFlags(t *testing.T) []string {
	t.Helper()
	return slices.DeleteFunc(goEnv(t), func(v string) bool { return strings.HasPrefix(v, "GOFLAGS=") })
}

// TestGettingStartedNodeIntegrator runs docs/getting-started/node-integrator.md as a
// reader does on `make cluster`: the export lines it printed, then every block of the
// page, with nothing else but the published files (the deploy config and RBAC, and the
// module) taken from this checkout. The page's kplug command and Go program must get the
// puller's credentials through a token the apiserver issued for the pod.
func TestGettingStartedNodeIntegrator(t *testing.T) {
	page := readDocPage(t, "docs/getting-started/node-integrator.md")
	c := startCluster(t)
	deployDir := filepath.Join(moduleRoot(t), "deploy", "image-credential-provider")
	work := t.TempDir()
	out := c.after(page).run(t, work, append(noGoFlags(t), "HOME="+work),
		"https://raw.githubusercontent.com/kplug/kplug/main/deploy/image-credential-provider/credential-provider-config.yaml",
		"file://"+filepath.Join(deployDir, "credential-provider-config.yaml"),
		"https://raw.githubusercontent.com/kplug/kplug/main/deploy/image-credential-provider/rbac.yaml", filepath.Join(deployDir, "rbac.yaml"),
		"go get github.com/kplug/kplug@latest", "go mod edit -require=github.com/kplug/kplug@v0.0.0 -replace=github.com/kplug/kplug="+moduleRoot(t),
	)
	registry := c.value(t, "REGISTRY")
	for _, want := range []string{
		"valid (1 providers, config hash sha256:",
		"clusterrole.rbac.authorization.k8s.io/kplug-image-credential-audience created",
		fmt.Sprintf(`{"auths":{%q:{"username":"puller","password":"`, registry),
		"\n" + registry + "\n", // the Go program's one key
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page's output lacks %q:\n%s", want, out)
		}
	}
}

// TestGettingStartedClusterOperator runs docs/getting-started/cluster-operator.md as a
// reader does on `make cluster` (as root: two apiservers, the second without batch/v1):
// the export lines, then every block of the page (the peer CA and certificates and the
// sidecar's kubeconfig with openssl, the RBAC, the static pod's command line beside each
// apiserver, the checks through the sidecar of the server without batch/v1), with only
// the published RBAC file taken from this checkout. The sidecars run without
// --lease-namespace: its default must be the RBAC's namespace.
func TestGettingStartedClusterOperator(t *testing.T) {
	page := readDocPage(t, "docs/getting-started/cluster-operator.md")
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("the page needs openssl: %v", err)
	}
	if os.Geteuid() != 0 {
		if os.Getenv(framework.RequireEnv) != "" {
			t.Fatal("the page needs root (two apiservers, files of group 65532)")
		}
		t.Skip("the page needs root (two apiservers, files of group 65532)")
	}
	checkPageRunsThePod(t, page)
	c := startCluster(t)
	work := t.TempDir()
	script := c.after(page).replaced(t,
		"https://raw.githubusercontent.com/kplug/kplug/main/docs/peerproxy-rbac.yaml", filepath.Join(moduleRoot(t), "docs", "peerproxy-rbac.yaml"))
	// In a process group of its own: the page's sidecars run in the background until its
	// last block stops them, or, if the page fails before it, until the test does.
	proc, err := framework.StartCommand("cluster-operator.md", filepath.Join(work, "page.log"),
		[]string{"bash", "-c", "cd " + work + "\nset -euo pipefail -x\n" + script}, append(os.Environ(), "HOME="+work))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Stop(10 * time.Second) })
	select {
	case <-proc.Done():
	case <-time.After(5 * time.Minute):
		t.Fatalf("the page did not finish in 5 minutes:\n%s", proc.Tail(100))
	}
	data, _ := os.ReadFile(proc.LogPath())
	out := string(data)
	if err := proc.Err(); err != nil {
		t.Fatalf("running %s: %v\n%s", page.path, err, out)
	}
	etc := c.value(t, "KUBERNETES_DIR")
	for _, f := range []string{"pki/apiserver.key", "pki/front-proxy-client.key", "pki/kplug/peerproxy-peer.key", "kplug-peerproxy.conf"} {
		if st, err := os.Stat(filepath.Join(etc, f)); err != nil || st.Mode().Perm() != 0o640 || fileGroup(t, filepath.Join(etc, f)) != 65532 {
			t.Errorf("after the page's steps, %s is not readable by group 65532 alone: %v", f, err)
		}
	}
	for _, want := range []string{
		"\nyes\n", // kubectl auth can-i create leases, as the sidecars' user
		"get --raw /readyz\nok",
		"jobs                    batch/v1",
		`apiserver_rerouted_request_total{code="200",group="batch",resource="jobs",version="v1"}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page's output lacks %q:\n%s", want, out)
		}
	}
}

// checkPageRunsThePod checks that the page's command line for make cluster is the static
// pod's: each flag of deploy/peerproxy's pod that names a file of kubeadm's /etc/kubernetes
// names the same file of $KUBERNETES_DIR on the page.
func checkPageRunsThePod(t *testing.T, page docPage) {
	t.Helper()
	pod := readPod(t, filepath.Join(moduleRoot(t), "deploy", "peerproxy", "kplug-peerproxy.yaml"))
	script := page.script()
	for _, a := range pod.Spec.Containers[0].Args {
		flag, file, ok := strings.Cut(a, "=/etc/kubernetes/")
		if !ok {
			continue
		}
		if want := flag + `="$KUBERNETES_DIR/` + file + `"`; !strings.Contains(script, want) {
			t.Errorf("the page runs the static pod without %s", want)
		}
	}
}

// TestReadmeQuickstart runs the README's quickstart as it is: make demo, in a fresh clone
// of HEAD, as a newcomer does. It must show the four mechanisms (the mixed version proxy
// only as root, and otherwise one line saying why not) with no tool in the clone but the
// three it builds: the first run's minutes (README) are those three's.
func TestReadmeQuickstart(t *testing.T) {
	page := readDocSection(t, "README.md", "## Quickstart")
	for _, tool := range []string{"etcd", "kube-apiserver", "kubectl"} {
		framework.ToolForTest(t, tool) // make tools has run: the clone takes them from its cache
	}
	clone := cloneHead(t, t.TempDir())
	out := page.run(t, clone, nil)
	bin, err := os.ReadDir(filepath.Join(clone, "_output", "bin"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range bin {
		if !strings.HasPrefix(e.Name(), ".") { // build.sh's keys
			got = append(got, e.Name())
		}
	}
	if want := []string{"etcd", "kplug", "kplug-demo-plugin", "kplug-exec-cache", "kplug-proxy-plugin", "kube-apiserver", "kubectl"}; !slices.Equal(got, want) {
		t.Errorf("make demo in a fresh clone left %v in _output/bin, want %v", got, want)
	}
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
	checkDemoOutput(t, clone, out)
}

// checkDemoOutput holds make demo's output to what a newcomer can trust: no log line of
// a component that reads like an error of the demo's (the in-process registry logs to a
// file), and each command it prints ("$ ...") names a program that a shell in the clone
// finds as printed in dir, where make demo ran (kubectl and kplug by their path in
// _output/bin, not on PATH).
func checkDemoOutput(t *testing.T, dir, out string) {
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
				prog = filepath.Join(dir, prog)
			}
			if _, err := os.Stat(prog); err != nil {
				t.Errorf("make demo printed %q, whose program is not there: %v", strings.TrimSpace(line), err)
			}
		} else if prog != "cat" {
			t.Errorf("make demo printed %q, whose program a shell finds only on PATH", strings.TrimSpace(line))
		}
	}
}
