package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/test/e2e/framework"
)

const selfSubjectReview = `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`

// buildBinary builds a package of this module into dir.
func buildBinary(t testing.TB, dir, pkg, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = "../.." // the module root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// buildKplug builds kplug into dir with kplug-proxy-plugin beside it, as make install and
// the release archives install them: proxy-plugin's daemon is then the small program.
func buildKplug(t testing.TB, dir string) string {
	t.Helper()
	buildBinary(t, dir, "./cmd/kplug-proxy-plugin", "kplug-proxy-plugin")
	return buildBinary(t, dir, "./cmd/kplug", "kplug")
}

// execKubeconfig writes a kubeconfig with one context per user, each running the test
// plugin as ./bin/testplugin, relative to the kubeconfig's directory.
func execKubeconfig(t *testing.T, cp *framework.ControlPlane, dir string, envs map[string][]clientcmdapi.ExecEnvVar) string {
	t.Helper()
	users := map[string]*clientcmdapi.ExecConfig{}
	for name, env := range envs {
		users[name] = &clientcmdapi.ExecConfig{
			APIVersion:      execcred.V1,
			Command:         "./bin/testplugin",
			Env:             env,
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
			InstallHint:     "build it with go build ./test/e2e/testplugin",
		}
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteExecKubeconfig(path, users); err != nil {
		t.Fatal(err)
	}
	return path
}

func run(t *testing.T, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func writeBytes(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestExecCredentialPlugins runs a token plugin and a client-certificate plugin, written
// with kplug's SDK, through the real kubectl and through kplug, against a real apiserver.
func TestExecCredentialPlugins(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	dir := t.TempDir()
	buildBinary(t, filepath.Join(dir, "bin"), "./test/e2e/testplugin", "testplugin")
	kplug := buildBinary(t, dir, "./cmd/kplug", "kplug")
	tokenFile := filepath.Join(dir, "token")
	writeBytes(t, tokenFile, []byte(cp.TokenUser.Token))
	kubeconfig := execKubeconfig(t, cp, dir, map[string][]clientcmdapi.ExecEnvVar{
		"token": {{Name: "TEST_TOKEN_FILE", Value: tokenFile}},
		"cert":  {{Name: "TEST_CERT_FILE", Value: cp.CertUser.Cert.CertFile}, {Name: "TEST_KEY_FILE", Value: cp.CertUser.Cert.KeyFile}},
	})
	kubectl := filepath.Join(cp.BinDir, "kubectl")

	for _, tt := range []struct{ context, user string }{{"token", "bob"}, {"cert", "alice"}} {
		out, errOut, err := run(t, kubectl, "--kubeconfig", kubeconfig, "--context", tt.context, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		if err != nil || out != tt.user {
			t.Errorf("kubectl as %s: %q, %v\n%s", tt.context, out, err, errOut)
		}
		out, errOut, err = run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", tt.context, "/apis/authentication.k8s.io/v1/selfsubjectreviews", "-d", selfSubjectReview)
		if err != nil || !strings.Contains(out, `"username":"`+tt.user+`"`) {
			t.Errorf("kplug request as %s: %q, %v\n%s", tt.context, out, err, errOut)
		}
	}

	out, _, err := run(t, kplug, "credential", "--kubeconfig", kubeconfig, "--context", "token")
	if err != nil || !strings.Contains(out, "credential:  token\n") || !strings.Contains(out, "<redacted, 48 bytes>") || strings.Contains(out, cp.TokenUser.Token) {
		t.Errorf("kplug credential (token): %q, %v", out, err)
	}
	out, _, err = run(t, kplug, "credential", "--kubeconfig", kubeconfig, "--context", "cert")
	if err != nil || !strings.Contains(out, "credential:  client certificate\n") || !strings.Contains(out, "subject:     CN=alice,O=developers\n") {
		t.Errorf("kplug credential (cert): %q, %v", out, err)
	}

	// A failing plugin: its message once, as it wrote it, then one line naming it, exit 1.
	writeBytes(t, tokenFile, nil)
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", "token", "/version")
	want := "testplugin: open " + tokenFile + ": no such file or directory\n" +
		`Error: execcred: plugin "` + filepath.Join(dir, "bin", "testplugin") + `" exited with code 1 (its stderr is above)` + "\n"
	if code := exitCode(err); code != 1 || errOut != want {
		t.Errorf("failing plugin: exit %d\nstderr %q\nwant   %q", code, errOut, want)
	}
}

// TestExecCredentialRefreshAfter401 revokes the token the plugin handed out (by deleting
// its service account) and checks that the runtime refreshes and retries on the 401.
func TestExecCredentialRefreshAfter401(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	ctx := t.Context()
	admin := clientFor(t, cp, cp.Admin, 0)
	dir := t.TempDir()
	buildBinary(t, filepath.Join(dir, "bin"), "./test/e2e/testplugin", "testplugin")
	tokenFile, countFile := filepath.Join(dir, "token"), filepath.Join(dir, "count")

	issue := func() {
		t.Helper()
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "rotating", Namespace: "default"}}
		if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "rotating", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		writeBytes(t, tokenFile, []byte(tr.Status.Token))
	}
	issue()
	kubeconfig := execKubeconfig(t, cp, dir, map[string][]clientcmdapi.ExecEnvVar{
		"sa": {{Name: "TEST_TOKEN_FILE", Value: tokenFile}, {Name: "TEST_COUNT_FILE", Value: countFile}},
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	src, err := execcred.NewForRESTConfig(cfg, execcred.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := execcred.HTTPTransport(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: rt, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	whoami := func() (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cfg.Host+"/apis/authentication.k8s.io/v1/selfsubjectreviews", strings.NewReader(selfSubjectReview))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	runs := func() int {
		b, _ := os.ReadFile(countFile)
		return len(b)
	}
	const user = `"username":"system:serviceaccount:default:rotating"`
	if code, body := whoami(); code != 201 || !strings.Contains(body, user) || runs() != 1 {
		t.Fatalf("first request: %d %s after %d runs", code, body, runs())
	}
	// Revoke: the token is bound to the service account's UID. The apiserver caches a
	// successful authentication for a few seconds, so wait until it rejects the old token.
	oldToken, _ := os.ReadFile(tokenFile)
	if err := admin.CoreV1().ServiceAccounts("default").Delete(ctx, "rotating", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	issue()
	waitRejected(t, cp, string(oldToken))
	if code, body := whoami(); code != 201 || !strings.Contains(body, user) {
		t.Errorf("after revocation: %d %s, want the request refreshed and retried", code, body)
	}
	if runs() != 2 {
		t.Errorf("%d plugin runs, want 2: one at start, one after the 401", runs())
	}
}

// waitRejected waits until the apiserver answers 401 to token.
func waitRejected(t *testing.T, cp *framework.ControlPlane, token string) {
	t.Helper()
	cfg := cp.RESTConfig(&framework.User{Token: token}, 0)
	client := clientFor(t, cp, &framework.User{Token: token}, 0)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		_, err := client.Discovery().ServerVersion()
		if apierrors.IsUnauthorized(err) {
			return
		}
	}
	t.Fatalf("the apiserver at %s still accepts the revoked token", cfg.Host)
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// TestClientGoAdapter checks that a client-go config adapted by execcred.ConfigFor
// authenticates REST calls, watches and both upgrade protocols through kplug's runtime.
func TestClientGoAdapter(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	admin := clientFor(t, cp, cp.Admin, 0)
	// The bootstrap "view" role is aggregated by kube-controller-manager, which does not
	// run here, so grant configmap reads directly.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader", Namespace: "default"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := admin.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bob-reads-configmaps", Namespace: "default"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "configmap-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "bob", APIGroup: "rbac.authorization.k8s.io"}},
	}
	if _, err := admin.RbacV1().RoleBindings("default").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	buildBinary(t, filepath.Join(dir, "bin"), "./test/e2e/testplugin", "testplugin")
	tokenFile, countFile := filepath.Join(dir, "token"), filepath.Join(dir, "count")
	writeBytes(t, tokenFile, []byte(cp.TokenUser.Token))
	kubeconfig := execKubeconfig(t, cp, dir, map[string][]clientcmdapi.ExecEnvVar{
		"bob": {{Name: "TEST_TOKEN_FILE", Value: tokenFile}, {Name: "TEST_COUNT_FILE", Value: countFile}},
	})
	loaded, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	src, err := execcred.NewForRESTConfig(loaded, execcred.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := execcred.ConfigFor(loaded, src)
	if cfg.ExecProvider != nil {
		t.Fatal("ConfigFor left client-go's exec provider in place")
	}
	bob, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// A watch, then a REST call by the admin that the watch sees.
	var w watch.Interface
	for { // the new binding reaches the authorizer's cache within moments
		w, err = bob.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("watch as bob: %v", err)
	}
	defer w.Stop()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "seen-by-bob", Namespace: "default"}}
	if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if got := ev.Object.(*corev1.ConfigMap).Name; got != "seen-by-bob" {
			t.Errorf("watch event for %s", got)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	if _, err := bob.CoreV1().ConfigMaps("default").Get(ctx, "seen-by-bob", metav1.GetOptions{}); err != nil {
		t.Errorf("get as bob: %v", err)
	}

	// Upgrades: bob may not exec into pods, so an authenticated request is forbidden as
	// bob; an unauthenticated one would be a 401 instead.
	url := bob.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("nope").SubResource("exec").
		Param("command", "true").Param("stdout", "true").URL()
	for name, newExecutor := range map[string]func() (remotecommand.Executor, error){
		"websocket": func() (remotecommand.Executor, error) {
			return remotecommand.NewWebSocketExecutor(cfg, "GET", url.String())
		},
		"spdy": func() (remotecommand.Executor, error) { return remotecommand.NewSPDYExecutor(cfg, "POST", url) },
	} {
		ex, err := newExecutor()
		if err != nil {
			t.Fatal(err)
		}
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), `"bob"`) {
			t.Errorf("%s exec: %v, want it forbidden for user bob", name, err)
		}
	}
	if b, _ := os.ReadFile(countFile); len(b) != 1 {
		t.Errorf("the plugin ran %d times for all of this, want 1", len(b))
	}
}
