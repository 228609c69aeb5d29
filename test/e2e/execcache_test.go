package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/test/e2e/framework"
)

// execCacheSetup is a control plane and a kubeconfig whose user runs the test plugin
// through `kplug exec-cache`.
type execCacheSetup struct {
	cp                          *framework.ControlPlane
	kplug, lean, plugin         string // kplug, kplug-exec-cache and the wrapped test plugin
	kubectl, kubeconfig         string
	cacheDir, tokenFile, counts string
}

// newExecCacheSetup builds kplug and the test plugin, and writes a kubeconfig whose user
// "cached" runs `kplug exec-cache -- testplugin`, "lean" `kplug-exec-cache -- testplugin`
// on the same cache, and "direct" the plugin alone, with pluginEnv.
func newExecCacheSetup(t testing.TB, cp *framework.ControlPlane, pluginEnv ...clientcmdapi.ExecEnvVar) *execCacheSetup {
	t.Helper()
	dir := t.TempDir()
	s := &execCacheSetup{
		cp:        cp,
		kplug:     buildBinary(t, dir, "./cmd/kplug", "kplug"),
		lean:      buildBinary(t, dir, "./cmd/kplug-exec-cache", "kplug-exec-cache"),
		kubectl:   filepath.Join(cp.BinDir, "kubectl"),
		cacheDir:  filepath.Join(dir, "cache"),
		tokenFile: filepath.Join(dir, "token"),
		counts:    filepath.Join(dir, "count"),
	}
	plugin := buildBinary(t, dir, "./test/e2e/testplugin", "testplugin")
	s.plugin = plugin
	env := append([]clientcmdapi.ExecEnvVar{
		{Name: "TEST_TOKEN_FILE", Value: s.tokenFile},
		{Name: "TEST_COUNT_FILE", Value: s.counts},
	}, pluginEnv...)
	s.kubeconfig = filepath.Join(dir, "kubeconfig")
	users := map[string]*clientcmdapi.ExecConfig{
		"cached": {
			APIVersion:      execcred.V1,
			Command:         s.kplug,
			Args:            []string{"exec-cache", "--cache-dir", s.cacheDir, "--", plugin},
			Env:             env,
			InteractiveMode: clientcmdapi.IfAvailableExecInteractiveMode,
		},
		"lean": {
			APIVersion:      execcred.V1,
			Command:         s.lean,
			Args:            []string{"--cache-dir", s.cacheDir, "--", plugin},
			Env:             env,
			InteractiveMode: clientcmdapi.IfAvailableExecInteractiveMode,
		},
		"direct": {
			APIVersion:      execcred.V1,
			Command:         plugin,
			Env:             env,
			InteractiveMode: clientcmdapi.IfAvailableExecInteractiveMode,
		},
	}
	if err := cp.WriteExecKubeconfig(s.kubeconfig, users); err != nil {
		t.Fatal(err)
	}
	return s
}

// runs is how many times the wrapped plugin ran.
func (s *execCacheSetup) runs() int {
	b, _ := os.ReadFile(s.counts)
	return len(b)
}

// whoami runs kubectl auth whoami as the context's user and returns the username.
func (s *execCacheSetup) whoami(t *testing.T, context string) (string, string, error) {
	t.Helper()
	return run(t, s.kubectl, "--kubeconfig", s.kubeconfig, "--context", context, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
}

// TestExecCacheKubectl: real kubectl processes share one run of the plugin through
// `kplug exec-cache`, and recover from a revoked token on the next command.
func TestExecCacheKubectl(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	ctx := t.Context()
	admin := clientFor(t, cp, cp.Admin, 0)
	s := newExecCacheSetup(t, cp, clientcmdapi.ExecEnvVar{Name: "TEST_SLEEP", Value: "500ms"})
	issue := func() string {
		t.Helper()
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "rotating", Namespace: "default"}}
		if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "rotating", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		writeBytes(t, s.tokenFile, []byte(tr.Status.Token))
		return tr.Status.Token
	}
	const user = "system:serviceaccount:default:rotating"
	oldToken := issue()

	// 20 concurrent kubectl commands: one run of the 500 ms plugin.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			out, errOut, err := s.whoami(t, "cached")
			if err != nil || out != user {
				t.Errorf("kubectl %d: %q, %v\n%s", i, out, err, errOut)
			}
		})
	}
	wg.Wait()
	if n := s.runs(); n != 1 {
		t.Fatalf("20 concurrent kubectl commands ran the plugin %d times, want 1", n)
	}
	out, _, err := run(t, s.kplug, "exec-cache", "--cache-dir", s.cacheDir, "--list")
	if err != nil || !strings.Contains(out, " v1 ") || !strings.Contains(out, "token (") || !strings.HasSuffix(out, "  20\n") || strings.Contains(out, oldToken) {
		t.Errorf("--list: %v\n%s", err, out)
	}

	// Revoke the cached token: the service account it is bound to is replaced.
	if err := admin.CoreV1().ServiceAccounts("default").Delete(ctx, "rotating", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	issue()
	waitRejected(t, cp, oldToken)
	// This kubectl is served the revoked token, gets a 401, and runs the plugin again;
	// client-go does not retry the failed request, so the command may fail.
	out, errOut, err := s.whoami(t, "cached")
	t.Logf("the command that met the revoked token: %q, %v, %s", out, err, strings.TrimSpace(errOut))
	if n := s.runs(); n != 2 {
		t.Fatalf("after the 401: %d plugin runs, want 2 (the wrapper must take the second call for a refresh)", n)
	}
	// The next commands recover, from the cache.
	for i := range 3 {
		out, errOut, err = s.whoami(t, "cached")
		if err != nil || out != user {
			t.Errorf("command %d after the refresh: %q, %v\n%s", i, out, err, errOut)
		}
	}
	if n := s.runs(); n != 2 {
		t.Errorf("%d plugin runs, want 2: the refreshed token is served from the cache", n)
	}
	// kplug-exec-cache is the same cache: its kubectl commands are served the same entry.
	for i := range 3 {
		out, errOut, err = s.whoami(t, "lean")
		if err != nil || out != user {
			t.Errorf("kplug-exec-cache command %d: %q, %v\n%s", i, out, err, errOut)
		}
	}
	if n := s.runs(); n != 2 {
		t.Errorf("%d plugin runs, want 2: kplug-exec-cache serves the entry kplug exec-cache stored", n)
	}
}
