package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/test/e2e/framework"
)

// BenchmarkExecCacheKubectl times `kubectl get ns` against a real apiserver with a
// credential plugin that takes 500 ms: the plugin alone, and through `kplug exec-cache`
// with an empty cache (cold) and a filled one (warm), beside a static token (no plugin);
// then 20 such commands at once.
// plugin-runs/op counts the plugin's runs.
func BenchmarkExecCacheKubectl(b *testing.B) {
	cp := framework.StartForTest(b, framework.Options{})
	grantNamespaceList(b, cp, "bob")
	s := newExecCacheSetup(b, cp, clientcmdapi.ExecEnvVar{Name: "TEST_SLEEP", Value: "500ms"})
	if err := os.WriteFile(s.tokenFile, []byte(cp.TokenUser.Token), 0o600); err != nil {
		b.Fatal(err)
	}
	// kubeContext "" is the static token user: no plugin at all, the floor.
	getNS := func(b *testing.B, kubeContext string) {
		ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
		defer cancel()
		args := []string{"--kubeconfig", s.kubeconfig, "--context", kubeContext}
		if kubeContext == "" {
			args = []string{"--kubeconfig", cp.TokenUser.Kubeconfig}
		}
		cmd := exec.CommandContext(ctx, s.kubectl, append(args, "get", "ns", "-o", "name")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("kubectl get ns: %v\n%s", err, out)
		}
	}
	parallel := func(b *testing.B, kubeContext string, n int) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { getNS(b, kubeContext) })
		}
		wg.Wait()
	}
	clearCache := func(b *testing.B) {
		b.StopTimer()
		if err := os.RemoveAll(s.cacheDir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	cases := []struct {
		name string
		op   func(b *testing.B)
	}{
		{"static token, no plugin", func(b *testing.B) { getNS(b, "") }},
		{"plugin alone", func(b *testing.B) { getNS(b, "direct") }},
		{"exec-cache cold", func(b *testing.B) { clearCache(b); getNS(b, "cached") }},
		{"exec-cache warm", func(b *testing.B) { getNS(b, "cached") }},
		{"kplug-exec-cache warm", func(b *testing.B) { getNS(b, "lean") }},
		{"20 parallel, static token, no plugin", func(b *testing.B) { parallel(b, "", 20) }},
		{"20 parallel, plugin alone", func(b *testing.B) { parallel(b, "direct", 20) }},
		{"20 parallel, exec-cache cold", func(b *testing.B) { clearCache(b); parallel(b, "cached", 20) }},
		{"20 parallel, exec-cache warm", func(b *testing.B) { parallel(b, "cached", 20) }},
		{"20 parallel, kplug-exec-cache warm", func(b *testing.B) { parallel(b, "lean", 20) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			getNS(b, "cached") // the warm case starts warm; kubectl's own caches are warm for all
			before := s.runs()
			b.ResetTimer()
			for b.Loop() {
				c.op(b)
			}
			b.ReportMetric(float64(s.runs()-before)/float64(b.N), "plugin-runs/op")
		})
	}
}

// grantNamespaceList lets user list namespaces (the bootstrap view role is aggregated by
// kube-controller-manager, which does not run here).
func grantNamespaceList(b *testing.B, cp *framework.ControlPlane, user string) {
	b.Helper()
	ctx := b.Context()
	admin := clientFor(b, cp, cp.Admin, 0)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "namespace-lister"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list"}}},
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-lists-namespaces"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: user, APIGroup: "rbac.authorization.k8s.io"}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	// The binding reaches the authorizer's cache within moments.
	client := clientFor(b, cp, cp.TokenUser, 0)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s still cannot list namespaces: %v", user, err)
		}
	}
}

// BenchmarkExecCacheProcess times one warm hit as a whole process, the way a client pays
// for it: `kplug exec-cache` and `kplug-exec-cache` beside the plugin itself and a shell
// that runs nothing (the floor: each op is `sh -c 'CMD; :'`, so that every call has a
// parent of its own, as each kubectl does, and is not taken for a refresh). The plugin is
// the tests' own, a Go program built with kplug's SDK.
func BenchmarkExecCacheProcess(b *testing.B) {
	dir := b.TempDir()
	kplug := buildBinary(b, dir, "./cmd/kplug", "kplug")
	lean := buildBinary(b, dir, "./cmd/kplug-exec-cache", "kplug-exec-cache")
	plugin := buildBinary(b, dir, "./test/e2e/testplugin", "testplugin")
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("a-token"), 0o600); err != nil {
		b.Fatal(err)
	}
	info, err := execcred.ExecInfo(execcred.V1, false, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	env := append(os.Environ(), execcred.InfoEnv+"="+string(info), "TEST_TOKEN_FILE="+token)
	cache := filepath.Join(dir, "cache")
	sh := func(b *testing.B, command string) {
		cmd := exec.Command("/bin/sh", "-c", command+"; :")
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil || (command != "true" && !strings.Contains(string(out), "a-token")) {
			b.Fatalf("%s: %v\n%s", command, err, out)
		}
	}
	cases := []struct{ name, command string }{
		{"shell floor", "true"},
		{"plugin alone", plugin},
		{"kplug exec-cache warm", kplug + " exec-cache --cache-dir " + cache + " -- " + plugin},
		{"kplug-exec-cache warm", lean + " --cache-dir " + cache + " -- " + plugin},
	}
	if base := baselineKplug(b); base != "" {
		cases = append(cases, struct{ name, command string }{"baseline kplug exec-cache warm", base + " exec-cache --cache-dir " + cache + " -- " + plugin})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			sh(b, c.command) // fills the cache
			for b.Loop() {
				sh(b, c.command)
			}
		})
	}
}

// baselineKplug is the kplug binary named by KPLUG_BENCH_BASELINE_KPLUG, for a row beside
// this tree's in the same run (a build of main, say), or "" without it.
func baselineKplug(b *testing.B) string {
	path := os.Getenv("KPLUG_BENCH_BASELINE_KPLUG")
	if path == "" {
		return ""
	}
	if _, err := os.Stat(path); err != nil {
		b.Fatalf("KPLUG_BENCH_BASELINE_KPLUG: %v", err)
	}
	return path
}
