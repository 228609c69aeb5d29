package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/test/e2e/framework"
)

// proxyKubeconfig writes a kubeconfig whose users run `kplug proxy-plugin` with args.
func proxyKubeconfig(t *testing.T, cp *framework.ControlPlane, kplug, dir string, users map[string][]string) string {
	t.Helper()
	execs := map[string]*clientcmdapi.ExecConfig{}
	for name, args := range users {
		execs[name] = &clientcmdapi.ExecConfig{
			APIVersion:         execcred.V1,
			Command:            kplug,
			Args:               append([]string{"proxy-plugin"}, args...),
			ProvideClusterInfo: true,
			InteractiveMode:    clientcmdapi.NeverExecInteractiveMode,
		}
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteExecKubeconfig(path, execs); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExecProxy sends requests through kplug's reference exec proxy, which authenticates
// them to the real apiserver with an injected header or a client certificate.
func TestExecProxy(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	dir := t.TempDir()
	kplug := buildKplug(t, dir)
	runtimeDir := filepath.Join(dir, "run")
	t.Setenv("XDG_RUNTIME_DIR", runtimeDir) // for the kplug processes below
	kubeconfig := proxyKubeconfig(t, cp, kplug, dir, map[string][]string{
		"header": {"--header", "Authorization=Bearer " + cp.TokenUser.Token},
		"cert":   {"--client-cert", cp.CertUser.Cert.CertFile, "--client-key", cp.CertUser.Cert.KeyFile},
		"admin":  {"--client-cert", cp.Admin.Cert.CertFile, "--client-key", cp.Admin.Cert.KeyFile},
	})
	for _, tt := range []struct{ context, user string }{{"header", "bob"}, {"cert", "alice"}} {
		out, errOut, err := run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", tt.context,
			"/apis/authentication.k8s.io/v1/selfsubjectreviews", "-d", selfSubjectReview)
		if err != nil || !strings.Contains(out, `"username":"`+tt.user+`"`) {
			t.Errorf("kplug request through the %s proxy: %q, %v\n%s", tt.context, out, err, errOut)
		}
	}
	// Each client's proxy exits with it: no socket is left behind.
	waitNoSockets(t, filepath.Join(runtimeDir, "kplug"), 2*time.Second)

	kubectl := filepath.Join(cp.BinDir, "kubectl")
	whoami := kubectl + " auth whoami -o jsonpath={.status.userInfo.username}"
	t.Run("unmodified kubectl through kplug run", func(t *testing.T) {
		out, errOut, err := run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "cert", "--", "sh", "-c", whoami)
		if err != nil || out != "alice" {
			t.Errorf("kplug run -- kubectl auth whoami: %q, %v\n%s", out, err, errOut)
		}
		_, _, err = run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "cert", "--", "sh", "-c", "exit 7")
		if code := exitCode(err); code != 7 {
			t.Errorf("kplug run -- sh -c 'exit 7' exited %d, want 7", code)
		}
	})

	t.Run("kubectl create, get and list through kplug run", func(t *testing.T) {
		script := kubectl + " create configmap via-run --from-literal=k=v -o name && " +
			kubectl + " get configmap via-run -o jsonpath={.data.k} && echo && " +
			kubectl + " get configmaps -o name"
		out, errOut, err := run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "admin", "--", "sh", "-c", script)
		if err != nil || !strings.HasPrefix(out, "configmap/via-run\nv\n") || !strings.Contains(out[len("configmap/via-run\nv\n"):], "configmap/via-run") {
			t.Errorf("kubectl create, get, list: %q, %v\n%s", out, err, errOut)
		}
	})

	t.Run("client-go through execproxy.Connect", func(t *testing.T) {
		clientGoThroughProxy(t, kubeconfig)
	})

	t.Run("a killed proxy is started again", func(t *testing.T) {
		// The daemon's command line is only "kplug-proxy-plugin --daemon" (its flags come
		// on stdin); [n] keeps the pattern from matching this shell's own command line.
		script := whoami + `; echo; pkill -9 -f "^` + kplug + `-proxy-plugin --daemo[n]" || echo no proxy killed; sleep 0.5; ` + whoami
		out, errOut, err := run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "header", "--", "sh", "-c", script)
		if err != nil || out != "bob\nbob" {
			t.Errorf("whoami, kill the proxy, whoami: %q, %v\n%s", out, err, errOut)
		}
	})

	t.Run("the daemon is kplug-proxy-plugin, or kplug alone", func(t *testing.T) {
		// With kplug-proxy-plugin beside kplug (make install, a release archive), that
		// small program is what keeps serving; with kplug alone (go install), kplug.
		alone := filepath.Join(t.TempDir(), "kplug")
		if b, err := exec.Command("cp", kplug, alone).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, b)
		}
		aloneKubeconfig := proxyKubeconfig(t, cp, alone, filepath.Dir(alone), map[string][]string{
			"header": {"--header", "Authorization=Bearer " + cp.TokenUser.Token},
		})
		for _, tt := range []struct {
			kplug, kubeconfig string
			want              []string
		}{
			{kplug, kubeconfig, []string{kplug + "-proxy-plugin", "--daemon"}},
			{alone, aloneKubeconfig, []string{alone, "proxy-plugin", "--daemon"}},
		} {
			// The daemon of an earlier run exits once it sees its client gone, which may
			// not have happened yet: only this run's daemon must be counted.
			poll.Until(t, "the daemons of earlier runs to exit", func() bool { return len(daemonsRunning(tt.want)) == 0 })
			client := exec.Command(tt.kplug, "run", "--kubeconfig", tt.kubeconfig, "--context", "header", "--", "sh", "-c", whoami+"; echo; sleep 61.5")
			stdout, err := client.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := client.Start(); err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			daemons := daemonsRunning(tt.want)
			_ = client.Process.Kill()
			_ = client.Wait()
			_ = exec.Command("pkill", "-f", "sleep 61.5").Run()
			if line != "bob\n" || len(daemons) != 1 {
				t.Errorf("%s run: whoami %q; daemons %q: %v, want one", tt.kplug, line, tt.want, daemons)
			}
			waitNoSockets(t, filepath.Join(runtimeDir, "kplug"), 2*time.Second)
		}
	})

	t.Run("the proxy exits when its client is killed", func(t *testing.T) {
		client := exec.Command(kplug, "run", "--kubeconfig", kubeconfig, "--context", "header", "--", "sleep", "61.25")
		if err := client.Start(); err != nil {
			t.Fatal(err)
		}
		sockets := filepath.Join(runtimeDir, "kplug", "proxy-*.sock")
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if m, _ := filepath.Glob(sockets); len(m) > 0 {
				break
			}
		}
		if m, _ := filepath.Glob(sockets); len(m) == 0 {
			t.Fatal("the proxy never started")
		}
		_ = client.Process.Kill() // SIGKILL: no cleanup runs in the client
		_ = client.Wait()
		waitNoSockets(t, filepath.Join(runtimeDir, "kplug"), 2*time.Second)
		_ = exec.Command("pkill", "-f", "sleep 61.25").Run() // the client's child, orphaned by SIGKILL
	})
}

// daemonsRunning are the PIDs of the processes whose command line is args, and whose
// executable is args[0].
func daemonsRunning(args []string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if slices.Equal(strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00"), args) && exe == args[0] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitNoSockets waits until no proxy socket is left in dir: every proxy has exited.
func waitNoSockets(t *testing.T, dir string, within time.Duration) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		left, _ = filepath.Glob(filepath.Join(dir, "proxy-*.sock"))
		if len(left) == 0 {
			return
		}
	}
	out, _ := exec.Command("sh", "-c", "ps -eo pid,args | grep proxy-plugin | grep -v grep").CombinedOutput()
	t.Errorf("proxies still running after %v: sockets %v\n%s", within, left, out)
	_ = exec.Command("pkill", "-9", "-f", "/kplug proxy-plugin|/kplug-proxy-plugin --daemon").Run()
	_ = os.RemoveAll(dir)
}

// connectContext connects to the API server of kubeconfig's context through
// execproxy.Connect, as a library user does, and returns the session (to close) and a
// clientset on Session.Config.
func connectContext(ctx context.Context, kubeconfig, contextName string) (*execproxy.Session, *kubernetes.Clientset, error) {
	loading := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{CurrentContext: contextName}).ClientConfig()
	if err != nil {
		return nil, nil, err
	}
	session, err := execproxy.Connect(ctx, cfg, execproxy.Options{})
	if err != nil {
		return nil, nil, err
	}
	proxied, err := session.Config()
	if err == nil {
		var cs *kubernetes.Clientset
		if cs, err = kubernetes.NewForConfig(proxied); err == nil {
			return session, cs, nil
		}
	}
	session.Close()
	return nil, nil, err
}

// clientGoThroughProxy uses a client-go clientset through execproxy.Connect, as the admin
// (client certificate in the proxy): create, get, list, and a watch whose event must come
// through.
func clientGoThroughProxy(t *testing.T, kubeconfig string) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	session, cs, err := connectContext(ctx, kubeconfig, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	if !session.Proxied() {
		t.Fatal("the plugin answered without a proxy")
	}
	cms := cs.CoreV1().ConfigMaps("default")
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	sent := time.Now()
	created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "via-client-go"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	got, err := cms.Get(ctx, "via-client-go", metav1.GetOptions{})
	if err != nil || got.UID != created.UID {
		t.Fatalf("get: %v, %v", got, err)
	}
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended before the ADDED event")
			}
			if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM && ev.Type == watch.Added && cm.Name == "via-client-go" {
				t.Logf("watch event for the created configmap arrived %v after the create was sent", time.Since(sent))
				return
			}
		case <-ctx.Done():
			t.Fatal("no watch event for the created configmap")
		}
	}
}
