package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubeletv1 "k8s.io/kubelet/config/v1"

	"github.com/kplug/kplug/imagecred"
	"github.com/kplug/kplug/imagecred/kubeapi"
	"github.com/kplug/kplug/internal/cli"
	"github.com/kplug/kplug/internal/testkit/registrytest"
	"github.com/kplug/kplug/test/e2e/framework"
)

// runKplugEnv makes the test binary act as the kplug CLI, so that a CredentialProviderConfig
// can name it as a plugin (kplug image-credential plugin token-exchange) without a build.
const runKplugEnv = "KPLUG_E2E_RUN_KPLUG"

func init() {
	if os.Getenv(runKplugEnv) == "1" {
		os.Exit(cli.Run(context.Background(), os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})) //nolint:forbidigo // a helper process: no test here
	}
}

const (
	registryAudience = "registry.example"
	identityKey      = "registry.example/identity"
)

// TestImageCredentialServiceAccountPull is KEP-4412 end to end: a pod's service account,
// a TokenRequest bound to the pod from the real kube-apiserver, the reference
// token-exchange plugin trading it (verified by TokenReview) for registry credentials, and
// a real pull from an authenticating OCI registry with only the credentials kplug printed.
func TestImageCredentialServiceAccountPull(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	client := clientFor(t, cp, cp.Admin, 0)

	reg := startRegistry(t)
	ref := reg.Host + "/team/app:v1"
	pushed := reg.Push(t, ref, 512, 2)

	ns := "imagecred"
	mustCreate(t, client, ns)
	pod := createPod(ctx, t, client, ns, "app", "puller", ref, map[string]string{identityKey: "team-a", "unrelated": "x"})
	exchange := startTokenExchange(t, client, reg.PullerPassword)

	binDir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(binDir, "token-exchange")); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, config, fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: token-exchange
  matchImages: [%q]
  defaultCacheDuration: 1m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: [image-credential, plugin, token-exchange, --endpoint, %q, --audience, registry, --username, puller]
  env: [{name: %s, value: "1"}]
  tokenAttributes:
    serviceAccountTokenAudience: %s
    cacheType: ServiceAccount
    requireServiceAccount: true
    requiredServiceAccountAnnotationKeys: [%s]
`, reg.Host, exchange.url, runKplugEnv, registryAudience, identityKey))

	var stdout, stderr bytes.Buffer
	code := cli.Run(ctx, []string{"image-credential", "get", ref, "--config", config, "--bin-dir", binDir,
		"--kubeconfig", cp.Admin.Kubeconfig, "--pod", ns + "/app"}, cli.IO{In: strings.NewReader(""), Out: &stdout, Err: &stderr})
	if code != cli.ExitOK {
		t.Fatalf("kplug image-credential get: exit %d: %s", code, stderr.String())
	}
	var out struct {
		Auths map[string]struct{ Username, Password, Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	creds, ok := out.Auths[reg.Host]
	if !ok || len(out.Auths) != 1 || creds.Username != "puller" || creds.Password != reg.PullerPassword {
		t.Fatalf("auths = %+v, want the puller's credentials for %s", out.Auths, reg.Host)
	}

	// What the token endpoint received is a token from the apiserver for our audience,
	// bound to the pod, for the pod's service account.
	got := exchange.only(t)
	claims := jwtClaims(t, got.subject)
	k8s, _ := claims["kubernetes.io"].(map[string]any)
	podClaim, _ := k8s["pod"].(map[string]any)
	saClaim, _ := k8s["serviceaccount"].(map[string]any)
	if aud, _ := claims["aud"].([]any); len(aud) != 1 || aud[0] != registryAudience {
		t.Errorf("token audience %v, want [%s]", claims["aud"], registryAudience)
	}
	if podClaim["name"] != "app" || podClaim["uid"] != string(pod.UID) {
		t.Errorf("token bound to pod %v, want app/%s", podClaim, pod.UID)
	}
	sa, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "puller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if saClaim["name"] != "puller" || saClaim["uid"] != string(sa.UID) {
		t.Errorf("token for service account %v, want puller/%s", saClaim, sa.UID)
	}
	if got.user != "system:serviceaccount:imagecred:puller" || got.audience != "registry" {
		t.Errorf("exchange saw user %q, audience %q", got.user, got.audience)
	}

	// A real pull with nothing but the printed credentials.
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuth(&authn.Basic{Username: creds.Username, Password: creds.Password}))
	if err != nil {
		t.Fatalf("pull with the returned credentials: %v", err)
	}
	if d, err := img.Digest(); err != nil || d != pushed {
		t.Errorf("pulled digest %v (%v), want %v", d, err, pushed)
	}
	if _, err := remote.Image(r, remote.WithContext(ctx)); err == nil {
		t.Error("anonymous pull succeeded; the registry does not check credentials")
	}
}

// TestImageCredentialServiceAccountRules runs the library against the real apiserver: what
// it reads from a ServiceAccount, the TokenRequest the apiserver accepts (bound to the pod,
// with the service account's UID) and the cases where the plugin must not run.
func TestImageCredentialServiceAccountRules(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	client := clientFor(t, cp, cp.Admin, 0)
	ns := "rules"
	mustCreate(t, client, ns)
	pod := createPod(ctx, t, client, ns, "app", "annotated", "registry.io/app", map[string]string{identityKey: "id", "other": "x"})
	bare := createPod(ctx, t, client, ns, "bare-app", "bare", "registry.io/app", nil)
	accounts := kubeapi.NewServiceAccounts(client, kubeapi.Options{})

	sa, err := accounts.ServiceAccount(ctx, ns, "annotated")
	if err != nil {
		t.Fatal(err)
	}
	if sa.UID == "" || sa.Annotations[identityKey] != "id" {
		t.Errorf("service account %+v", sa)
	}
	req := imagecred.TokenRequest{Namespace: ns, ServiceAccount: "annotated", ServiceAccountUID: sa.UID,
		Audience: registryAudience, PodName: "app", PodUID: pod.UID}
	token, err := accounts.Token(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	review, err := client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{registryAudience}},
	}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:rules:annotated" {
		t.Errorf("TokenReview of the token: %+v, %v", review.Status, err)
	}
	if podName := review.Status.User.Extra["authentication.kubernetes.io/pod-name"]; len(podName) != 1 || podName[0] != "app" {
		t.Errorf("token not bound to the pod: extra %v", review.Status.User.Extra)
	}
	// The apiserver checks the service account UID kplug sends (TokenRequestServiceAccountUIDValidation).
	wrong := req
	wrong.ServiceAccountUID = "00000000-0000-0000-0000-000000000000"
	wrong.PodName = "other" // a different cache entry
	if _, err := accounts.Token(ctx, wrong); err == nil {
		t.Error("a TokenRequest with the wrong service account UID was accepted")
	}

	// A provider whose plugin would fail loudly if run: the required annotation is missing
	// on "bare", so it must not run, and no token may be requested.
	binDir := t.TempDir()
	writeFile(t, filepath.Join(binDir, "never"), "#!/bin/sh\necho ran >&2\nexit 7\n")
	if err := os.Chmod(filepath.Join(binDir, "never"), 0o700); err != nil {
		t.Fatal(err)
	}
	yes := true
	counting := &countingAccounts{ServiceAccounts: accounts}
	keyring, err := imagecred.New(imagecred.Options{
		Config: &imagecred.Config{Providers: []kubeletProvider{{
			Name: "never", MatchImages: []string{"registry.io"}, APIVersion: imagecred.APIVersionV1,
			DefaultCacheDuration: &metav1.Duration{Duration: time.Minute},
			TokenAttributes: &kubeletTokenAttributes{ServiceAccountTokenAudience: registryAudience, RequireServiceAccount: &yes,
				CacheType: "ServiceAccount", RequiredServiceAccountAnnotationKeys: []string{identityKey}},
		}}},
		BinDir:          binDir,
		ServiceAccounts: counting,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = keyring.Lookup(ctx, "registry.io/app", &imagecred.Pod{Namespace: ns, Name: "bare-app", UID: bare.UID, ServiceAccountName: "bare"})
	if !errors.Is(err, imagecred.ErrRequiredAnnotation) || counting.tokens != 0 {
		t.Errorf("missing annotation: %v with %d token requests; want %v and none", err, counting.tokens, imagecred.ErrRequiredAnnotation)
	}
	_, err = keyring.Lookup(ctx, "registry.io/app", nil)
	if !errors.Is(err, imagecred.ErrNoServiceAccount) {
		t.Errorf("no pod: %v, want %v", err, imagecred.ErrNoServiceAccount)
	}
	// With the annotation the plugin runs (and fails, which shows it ran with the token).
	_, err = keyring.Lookup(ctx, "registry.io/app", &imagecred.Pod{Namespace: ns, Name: "app", UID: pod.UID, ServiceAccountName: "annotated"})
	if err == nil || !strings.Contains(err.Error(), "exited with code 7: ran") || counting.tokens != 1 {
		t.Errorf("annotated: %v with %d token requests; want the plugin's failure after one", err, counting.tokens)
	}
}

type countingAccounts struct {
	imagecred.ServiceAccounts
	mu     sync.Mutex
	tokens int
}

func (c *countingAccounts) Token(ctx context.Context, req imagecred.TokenRequest) (string, error) {
	c.mu.Lock()
	c.tokens++
	c.mu.Unlock()
	return c.ServiceAccounts.Token(ctx, req)
}

func mustCreate(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	_, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// createServiceAccount creates a service account with annotations.
func createServiceAccount(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string, annotations map[string]string) {
	t.Helper()
	_, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// createPod creates a service account with annotations and an unscheduled pod using it.
func createPod(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, pod, sa, image string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	createServiceAccount(ctx, t, client, ns, sa, annotations)
	automount := false
	p, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod},
		Spec: corev1.PodSpec{
			ServiceAccountName:           sa,
			AutomountServiceAccountToken: &automount,
			Containers:                   []corev1.Container{{Name: "app", Image: image}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startRegistry serves a distribution registry with htpasswd users "pusher" and "puller".
func startRegistry(t *testing.T) *registrytest.Registry { return registrytest.Start(t) }

func randomString(t *testing.T) string { return registrytest.RandomString(t) }

// tokenExchange is a registrytest.TokenExchange for registryAudience that issues the
// registry password of "puller", for one test.
type tokenExchange struct {
	*registrytest.TokenExchange
	url string
}

type exchangeCall struct{ subject, user, audience string }

func startTokenExchange(t *testing.T, client kubernetes.Interface, password string) *tokenExchange {
	te := registrytest.StartTokenExchange(client, registryAudience, password)
	t.Cleanup(te.Close)
	return &tokenExchange{TokenExchange: te, url: te.URL}
}

func (te *tokenExchange) only(t *testing.T) exchangeCall {
	t.Helper()
	calls := te.Calls()
	if len(calls) != 1 {
		t.Fatalf("token endpoint called %d times, want 1", len(calls))
	}
	return exchangeCall{calls[0].Subject, calls[0].User, calls[0].Audience}
}

type (
	kubeletProvider        = kubeletv1.CredentialProvider
	kubeletTokenAttributes = kubeletv1.ServiceAccountTokenAttributes
)

// TestImageCredentialDockerHelperPull pulls through go-containerregistry's default
// keychain, which runs docker-credential-kplug (kplug image-credential docker-helper) as
// docker, crane and containerd would; the helper runs a kubelet-style provider plugin and
// keeps its answer in an on-disk cache across helper runs.
func TestImageCredentialDockerHelperPull(t *testing.T) {
	reg := startRegistry(t)
	ref := reg.Host + "/team/helper:v1"
	pushed := reg.Push(t, ref, 512, 2)

	dir := t.TempDir()
	binDir := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(binDir, 0o700); err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(dir, "plugin-runs")
	writeExecutable(t, filepath.Join(binDir, "static"), fmt.Sprintf(`#!/bin/sh
cat > /dev/null
echo run >> %q
printf '%%s' '{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"1h","auth":{"%s":{"username":"puller","password":"%s"}}}'
`, runs, reg.Host, reg.PullerPassword))
	config := filepath.Join(dir, "config.yaml")
	writeFile(t, config, fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: static
  matchImages: [%q]
  defaultCacheDuration: 1m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
`, reg.Host))
	installDockerHelper(t, dir, config, binDir, fmt.Sprintf(`{"credHelpers":{%q:"kplug"}}`, reg.Host))

	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pull := func() {
		t.Helper()
		img, err := remote.Image(r, remote.WithAuthFromKeychain(authn.DefaultKeychain))
		if err != nil {
			t.Fatalf("pull through the credential helper: %v", err)
		}
		if d, err := img.Digest(); err != nil || d != pushed {
			t.Fatalf("pulled digest %v (%v), want %v", d, err, pushed)
		}
	}
	pull()
	first := countLines(t, runs)
	if first == 0 {
		t.Fatal("the provider plugin never ran")
	}
	pull()
	if again := countLines(t, runs); again != first {
		t.Errorf("plugin ran %d more times on the second pull; the helper's disk cache should answer", again-first)
	}
}

// installDockerHelper puts docker-credential-kplug (kplug image-credential docker-helper
// with config, binDir and a cache under dir) first on $PATH, and a docker config.json
// holding dockerConfig in $DOCKER_CONFIG under dir, for the rest of the test. It returns
// the helper's path.
func installDockerHelper(t *testing.T, dir, config, binDir, dockerConfig string) string {
	t.Helper()
	helperDir := filepath.Join(dir, "path")
	dockerDir := filepath.Join(dir, "home", ".docker")
	for _, d := range []string{helperDir, dockerDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(helperDir, "docker-credential-kplug")
	writeExecutable(t, helper, fmt.Sprintf(`#!/bin/sh
%s=1 exec %q image-credential docker-helper --config %q --bin-dir %q --cache-dir %q "$@"
`, runKplugEnv, exe, config, binDir, filepath.Join(dir, "cache")))
	writeFile(t, filepath.Join(dockerDir, "config.json"), dockerConfig)
	t.Setenv("HOME", filepath.Dir(dockerDir))
	t.Setenv("DOCKER_CONFIG", dockerDir)
	t.Setenv("PATH", helperDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return helper
}

func writeExecutable(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o700); err != nil {
		t.Fatal(err)
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}
