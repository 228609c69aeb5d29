package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestSecurityExecProxyImpersonation gives a kubeconfig user whose proxy authenticates as
// the admin an impersonation of alice, who has no RBAC, and checks that requests act as
// alice on every client path: what the admin may do, alice may not.
// Issue 12 finding 5: the exec proxy path dropped as/as-uid/as-groups/as-user-extra.
func TestSecurityExecProxyImpersonation(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	dir := t.TempDir()
	kplug := buildKplug(t, dir)
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	kubeconfig := proxyKubeconfig(t, cp, kplug, dir, map[string][]string{
		"admin": {"--client-cert", cp.Admin.Cert.CertFile, "--client-key", cp.Admin.Cert.KeyFile},
	})
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	as := kc.AuthInfos["admin"].DeepCopy()
	as.Impersonate, as.ImpersonateUID = "alice", "alice-uid"
	as.ImpersonateGroups = []string{"developers"}
	as.ImpersonateUserExtra = map[string][]string{"reason": {"least-privilege"}}
	kc.AuthInfos["admin-as-alice"] = as
	asCtx := kc.Contexts["admin"].DeepCopy()
	asCtx.AuthInfo = "admin-as-alice"
	kc.Contexts["admin-as-alice"] = asCtx
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	admin := clientFor(t, cp, cp.Admin, 0)
	victim := func(name string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stillThere := func(name string) {
		t.Helper()
		if _, err := admin.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("configmap %s after a delete that alice may not do: %v", name, err)
		}
	}
	const wantUser = `"userInfo":{"username":"alice","uid":"alice-uid","groups":["developers","system:authenticated"],"extra":{"reason":["least-privilege"]}}`

	t.Run("kplug request", func(t *testing.T) {
		out, errOut, err := run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", "admin-as-alice",
			"/apis/authentication.k8s.io/v1/selfsubjectreviews", "-d", selfSubjectReview)
		if err != nil || !strings.Contains(out, wantUser) {
			t.Errorf("SelfSubjectReview as admin-as-alice: %q, %v\n%s\nwant %s", out, err, errOut, wantUser)
		}
		victim("request-victim")
		_, _, err = run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", "admin", "/api/v1/namespaces/default/configmaps/request-victim")
		if err != nil {
			t.Errorf("the admin itself may read the configmap: %v", err)
		}
		out, errOut, err = run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", "admin-as-alice",
			"-X", "DELETE", "/api/v1/namespaces/default/configmaps/request-victim")
		if exitCode(err) != 1 || !strings.Contains(out, `"reason":"Forbidden"`) || !strings.Contains(errOut, "403 Forbidden") {
			t.Errorf("DELETE as admin-as-alice: exit %d, stdout %q, stderr %q; want 403", exitCode(err), out, errOut)
		}
		stillThere("request-victim")
	})

	t.Run("kplug run -- kubectl", func(t *testing.T) {
		kubectl := filepath.Join(cp.BinDir, "kubectl")
		out, errOut, err := run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "admin-as-alice", "--",
			kubectl, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.uid} {.status.userInfo.groups} {.status.userInfo.extra}")
		if want := `alice alice-uid ["developers","system:authenticated"] {"reason":["least-privilege"]}`; err != nil || out != want {
			t.Errorf("kubectl auth whoami: %q, %v\n%s\nwant %q", out, err, errOut, want)
		}
		victim("run-victim")
		out, errOut, err = run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "admin-as-alice", "--",
			kubectl, "delete", "configmap", "run-victim")
		if exitCode(err) != 1 || !strings.Contains(errOut, `User "alice" cannot delete resource "configmaps"`) {
			t.Errorf("kubectl delete as admin-as-alice: exit %d, stdout %q, stderr %q; want forbidden", exitCode(err), out, errOut)
		}
		stillThere("run-victim")
	})

	t.Run("execproxy library", func(t *testing.T) {
		session, cs, err := connectContext(ctx, kubeconfig, "admin-as-alice")
		if err != nil {
			t.Fatal(err)
		}
		defer session.Close()
		review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil || review.Status.UserInfo.Username != "alice" || review.Status.UserInfo.UID != "alice-uid" {
			t.Errorf("SelfSubjectReview through the library: %+v, %v", review, err)
		}
		victim("library-victim")
		err = cs.CoreV1().ConfigMaps("default").Delete(ctx, "library-victim", metav1.DeleteOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("delete through the library as admin-as-alice: %v, want forbidden", err)
		}
		stillThere("library-victim")
	})
	waitNoSockets(t, filepath.Join(dir, "run", "kplug"), 5*time.Second)
}

// whoAmIEnv makes the test binary a Go program that uses the execproxy library: it
// connects with the context named in $WHOAMI_CONTEXT of the kubeconfig in $WHOAMI_KUBECONFIG,
// asks the API server who it is through Session.Config (client-go) and Session.Transport,
// prints both names and exits. A process of its own, so that the system roots it trusts
// are read from the SSL_CERT_FILE its test sets.
const whoAmIEnv = "KPLUG_E2E_WHOAMI"

func init() {
	if os.Getenv(whoAmIEnv) == "1" {
		if err := whoAmI(os.Getenv("WHOAMI_KUBECONFIG"), os.Getenv("WHOAMI_CONTEXT")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

func whoAmI(kubeconfig, contextName string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) //nolint:forbidigo // a helper process: no test here
	defer cancel()
	loading := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{CurrentContext: contextName}).ClientConfig()
	if err != nil {
		return err
	}
	session, err := execproxy.Connect(ctx, cfg, execproxy.Options{})
	if err != nil {
		return err
	}
	defer session.Close()
	proxied, err := session.Config()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(proxied)
	if err != nil {
		return err
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("Session.Config: %w", err)
	}
	rt, err := session.Transport()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.Host+"/apis/authentication.k8s.io/v1/selfsubjectreviews", strings.NewReader(selfSubjectReview))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return fmt.Errorf("Session.Transport: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("Config: %s\nTransport: %s %s", review.Status.UserInfo.Username, resp.Status, body)
	return nil
}

// TestSecurityExecProxySystemRoots trusts the API server through the system roots (no CA in
// the kubeconfig; SSL_CERT_FILE names the cluster CA) and authenticates with a client
// certificate: one a plain exec plugin returns, and one the exec proxy holds
// (--client-cert, the path a PKCS#11 key takes too). kplug request, kplug run -- kubectl and
// the library (Session.Config and Session.Transport) must all be alice, not anonymous.
// Issue 12 finding 10: with system roots, client certificates were silently not presented.
func TestSecurityExecProxySystemRoots(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	dir := t.TempDir()
	buildBinary(t, filepath.Join(dir, "bin"), "./test/e2e/testplugin", "testplugin")
	kplug := buildKplug(t, dir)
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	t.Setenv("SSL_CERT_FILE", cp.PKI.ClusterCA.File) // for every process the test starts
	alice := cp.CertUser.Cert
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteExecKubeconfig(kubeconfig, map[string]*clientcmdapi.ExecConfig{
		"cert-plugin": {
			APIVersion: execcred.V1, Command: "./bin/testplugin", InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
			Env: []clientcmdapi.ExecEnvVar{{Name: "TEST_CERT_FILE", Value: alice.CertFile}, {Name: "TEST_KEY_FILE", Value: alice.KeyFile}},
		},
		"proxy-cert": {
			APIVersion: execcred.V1, Command: kplug, InteractiveMode: clientcmdapi.NeverExecInteractiveMode, ProvideClusterInfo: true,
			Args: []string{"proxy-plugin", "--client-cert", alice.CertFile, "--client-key", alice.KeyFile},
		},
	}); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.CertificateAuthorityData = nil // trusted through the system roots
	}
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, kctx := range []string{"cert-plugin", "proxy-cert"} {
		out, errOut, err := run(t, kplug, "request", "--kubeconfig", kubeconfig, "--context", kctx,
			"/apis/authentication.k8s.io/v1/selfsubjectreviews", "-d", selfSubjectReview)
		if err != nil || !strings.Contains(out, `"username":"alice"`) {
			t.Errorf("kplug request --context %s: %q, %v\n%s", kctx, out, err, errOut)
		}

		t.Setenv(whoAmIEnv, "1")
		t.Setenv("WHOAMI_KUBECONFIG", kubeconfig)
		t.Setenv("WHOAMI_CONTEXT", kctx)
		lib, errOut, err := run(t, self)
		if err != nil || !strings.HasPrefix(lib, "Config: alice\nTransport: 201 Created ") || !strings.Contains(lib, `"username":"alice"`) {
			t.Errorf("the execproxy library with --context %s: %q, %v\n%s", kctx, lib, err, errOut)
		}
	}
	kubectl := filepath.Join(cp.BinDir, "kubectl")
	out, errOut, err := run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "proxy-cert", "--",
		kubectl, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if err != nil || out != "alice" {
		t.Errorf("kplug run -- kubectl auth whoami: %q, %v\n%s", out, err, errOut)
	}
	waitNoSockets(t, filepath.Join(dir, "run", "kplug"), 5*time.Second)
}
