package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/kplug/kplug/test/e2e/framework"
)

// TestGoInstallVersion installs kplug as a user does, `go install
// github.com/kplug/kplug/cmd/kplug@v1.98.7`, from a module proxy that serves HEAD as that
// version (a module zip made as the Go module proxy makes one from a tag), and checks that
// `kplug version` says v1.98.7: without -ldflags, the version comes from the build
// information go install records. Every other module comes from this machine's module
// cache, and the install uses a module cache of its own, so that nothing is downloaded
// and the machine's cache does not get a kplug v1.98.7.
func TestGoInstallVersion(t *testing.T) {
	const version = "v1.98.7"
	root := moduleRoot(t)
	dir := t.TempDir()
	proxy := filepath.Join(dir, "proxy", "github.com", "kplug", "kplug", "@v")
	if err := os.MkdirAll(proxy, 0o700); err != nil {
		t.Fatal(err)
	}
	// HEAD's tree (what a tag would hold), zipped with the Go module zip rules (nested
	// modules such as hack/tools left out).
	tree := filepath.Join(dir, "tree")
	if err := os.Mkdir(tree, 0o700); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("sh", "-c", `git -C "$0" archive --format=tar HEAD | tar -x -C "$1"`, root, tree)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive HEAD: %v\n%s", err, out)
	}
	zf, err := os.Create(filepath.Join(proxy, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	err = modzip.CreateFromDir(zf, module.Version{Path: "github.com/kplug/kplug", Version: version}, tree)
	if cerr := zf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("module zip of HEAD: %v", err)
	}
	gomod, err := exec.Command("git", "-C", root, "show", "HEAD:go.mod").Output()
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]any{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	for name, content := range map[string][]byte{version + ".mod": gomod, version + ".info": info, "list": []byte(version + "\n")} {
		if err := os.WriteFile(filepath.Join(proxy, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	install := exec.Command("go", "install", "github.com/kplug/kplug/cmd/kplug@"+version)
	install.Dir = dir
	install.Env = append(os.Environ(),
		"GOPROXY=file://"+filepath.Join(dir, "proxy")+",file://"+filepath.Join(strings.TrimSpace(string(modcache)), "cache", "download"),
		"GOMODCACHE="+filepath.Join(dir, "modcache"), "GOBIN="+bin, "GOSUMDB=off", "GOFLAGS=-modcacherw -trimpath",
		"CGO_ENABLED=0", "GOTOOLCHAIN=local")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install github.com/kplug/kplug/cmd/kplug@%s: %v\n%s", version, err, out)
	}
	out, err := exec.Command(filepath.Join(bin, "kplug"), "version", "-o", "json").Output()
	var got struct{ Kplug string }
	if err := errors.Join(err, json.Unmarshal(out, &got)); err != nil || got.Kplug != version {
		t.Errorf("kplug version after go install @%s: %q, %v", version, out, err)
	}
}

// cloneHead clones HEAD (what is committed) to parent/kplug, as a newcomer's clone: no
// _output yet, and so no tool in it.
func cloneHead(t *testing.T, parent string) string {
	t.Helper()
	clone := filepath.Join(parent, "kplug")
	if out, err := exec.Command("git", "clone", "--quiet", "--no-local", moduleRoot(t), clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	return clone
}

// TestFreshCloneReusesTools clones HEAD and runs hack/tools/build.sh there, as `make
// tools` in a fresh clone does: every tool must come from the cache outside the checkout
// (~/.cache/kplug/tools), none may be built again.
func TestFreshCloneReusesTools(t *testing.T) {
	for _, tool := range []string{"etcd", "kube-apiserver", "kubectl"} {
		framework.ToolForTest(t, tool) // make tools has run
	}
	clone := cloneHead(t, t.TempDir())
	start := time.Now()
	out, err := exec.Command(filepath.Join(clone, "hack", "tools", "build.sh")).CombinedOutput()
	if err != nil {
		t.Fatalf("hack/tools/build.sh in a fresh clone: %v\n%s", err, out)
	}
	t.Logf("make tools in a fresh clone: %v", time.Since(start).Round(time.Second))
	if strings.Contains(string(out), "tools: building") || !strings.Contains(string(out), "tools: kube-apiserver from the cache") {
		t.Errorf("a fresh clone built tools again:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(clone, "_output", "bin", "kube-apiserver")); err != nil {
		t.Errorf("kube-apiserver is not in the clone's _output/bin: %v", err)
	}
}

// TestToolsRefuseAnUnknownName names a tool that does not exist after one that does, as a
// make target with a misspelt name would: hack/tools/build.sh must fail on that name, with
// the names it knows, before it builds anything (with an empty tools cache, building etcd
// first would take minutes and leave it in _output/bin).
func TestToolsRefuseAnUnknownName(t *testing.T) {
	clone := cloneHead(t, t.TempDir())
	cache := t.TempDir()
	cmd := exec.Command(filepath.Join(clone, "hack", "tools", "build.sh"), "etcd", "kube-apisrver")
	cmd.Env = append(os.Environ(), "KPLUG_TOOLS_CACHE="+cache)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("hack/tools/build.sh etcd kube-apisrver: %v, want exit status 2", err)
	}
	const want = `tools: no tool is named "kube-apisrver"; the tools are: etcd kube-apiserver kubectl kube-controller-manager `
	if got := stderr.String(); !strings.HasPrefix(got, want) || strings.Count(got, "\n") != 1 || stdout.Len() != 0 {
		t.Errorf("hack/tools/build.sh etcd kube-apisrver printed %q on stdout and %q on stderr, want one line on stderr starting %q", stdout.String(), got, want)
	}
	if entries, err := os.ReadDir(cache); err != nil || len(entries) != 0 {
		t.Errorf("the tools cache after a refused name: %v, %v; want it empty", entries, err)
	}
	if _, err := os.Stat(filepath.Join(clone, "_output")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the clone's _output after a refused name: %v; want none", err)
	}
}

// TestKubectlPlugin installs kplug as kubectl-kplug on PATH, as krew does, and runs it
// through the pinned kubectl: `kubectl kplug version` and a subcommand with flags.
func TestKubectlPlugin(t *testing.T) {
	kubectl := framework.ToolForTest(t, "kubectl")
	bin := t.TempDir()
	buildBinary(t, bin, "./cmd/kplug", "kubectl-kplug")
	env := append(os.Environ(), pathWith(bin), "HOME="+t.TempDir())
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(kubectl, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run("plugin", "list", "--name-only"); !strings.Contains(out, "kubectl-kplug") {
		t.Errorf("kubectl plugin list does not list kubectl-kplug:\n%s", out)
	}
	var info struct{ Kplug, Kubernetes string }
	if out := run("kplug", "version", "-o", "json"); json.Unmarshal([]byte(out), &info) != nil || info.Kplug == "" || info.Kubernetes == "" {
		t.Errorf("kubectl kplug version -o json: %s", out)
	}
	if out := run("kplug", "completion", "bash"); !strings.Contains(out, "__start_kplug") {
		t.Errorf("kubectl kplug completion bash: %.200s", out)
	}
}

// TestMakeInstall runs `make install PREFIX=...` as a user without that directory on PATH:
// it must put both programs there, runnable, and print the one line that adds it to PATH;
// run again with the line applied it must say nothing more; and with another kplug first
// on PATH it must name that kplug. (The getting-started pages' tests run make install
// without PREFIX, into ~/go/bin.)
func TestMakeInstall(t *testing.T) {
	home := readerHome(t)
	prefix := filepath.Join(t.TempDir(), "usr")
	bin := filepath.Join(prefix, "bin")
	env := readerEnv(t, home)
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = moduleRoot(t), env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	lines := func(s ...string) string { return strings.Join(s, "\n") + "\n" }
	installed := "installed kplug, kplug-exec-cache and kplug-proxy-plugin in " + bin

	out := run(env, "make", "--no-print-directory", "install", "PREFIX="+prefix)
	want := lines(installed, "make install: "+bin+` is not on your PATH; add it (in ~/.profile too, to keep it): export PATH="$PATH:`+bin+`"`)
	if !strings.HasSuffix(out, want) {
		t.Errorf("make install PREFIX=%s printed\n%s\nwant it to end with\n%s", prefix, out, want)
	}
	// The line applied, as the user's shell would.
	withBin := slices.Clone(env)
	for i, kv := range withBin {
		if path, ok := strings.CutPrefix(kv, "PATH="); ok {
			withBin[i] = "PATH=" + path + ":" + bin
		}
	}
	if got := run(withBin, "bash", "-c", "kplug version -o json && kplug-exec-cache --help >/dev/null && command -v kplug"); !strings.HasSuffix(got, bin+"/kplug\n") || !strings.Contains(got, `"kplug"`) {
		t.Errorf("kplug on PATH after make install: %s", got)
	}
	if got := run(withBin, "hack/install.sh", bin, filepath.Join(moduleRoot(t), "_output", "bin")); got != lines(installed) {
		t.Errorf("make install with %s on PATH printed %q, want only %q", bin, got, lines(installed))
	}
	// Another kplug before it on PATH.
	other := t.TempDir()
	writeFile(t, filepath.Join(other, "kplug"), "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(other, "kplug"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, kv := range withBin {
		if path, ok := strings.CutPrefix(kv, "PATH="); ok {
			withBin[i] = "PATH=" + other + ":" + path
		}
	}
	want = lines(installed, "make install: "+other+"/kplug comes first on your PATH: put "+bin+` before it: export PATH="`+bin+`:$PATH"`)
	if got := run(withBin, "hack/install.sh", bin, filepath.Join(moduleRoot(t), "_output", "bin")); got != want {
		t.Errorf("make install with another kplug first on PATH printed\n%s\nwant\n%s", got, want)
	}
}
