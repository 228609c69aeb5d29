package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubeletv1 "k8s.io/kubelet/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/kplug/kplug/imagecred/plugin"
	"github.com/kplug/kplug/internal/cli"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/registrytest"
	"github.com/kplug/kplug/test/e2e/framework"
)

const (
	// nodeDocsDir holds the files docs/image-credentials.md quotes in "Running it on a
	// node": the kubelet runs them as they are.
	nodeDocsDir = "../../docs/image-credential-node"
	// docsEndpoint is the one value of the docs' provider a reader replaces: their token
	// service. The test puts its own there, and nothing else changes.
	docsEndpoint = "https://sts.registry.example/token"
	// sdkPluginEnv carries the SDK plugin's answer: "USER:PASSWORD".
	sdkPluginEnv = "KPLUG_E2E_SDK_PLUGIN_CREDENTIALS"
)

// sdkPlugin is an image credential provider written with imagecred/plugin, as a plugin
// author writes one: a plugin.Func run by plugin.Run. It refuses a request without a
// service-account token, and answers with the credentials its configuration gives it.
func sdkPlugin() int {
	f := func(_ context.Context, req *plugin.Request) (*plugin.Response, error) {
		if req.ServiceAccountToken == "" {
			return nil, errors.New("sdk-plugin: no service-account token in the request")
		}
		user, password, _ := strings.Cut(os.Getenv(sdkPluginEnv), ":")
		host, _, _ := strings.Cut(req.Image, "/")
		return &plugin.Response{CacheKeyType: plugin.CacheRegistry,
			Auth: map[string]plugin.AuthConfig{host: {Username: user, Password: password}}}, nil
	}
	if err := plugin.Run(context.Background(), f, strings.NewReader(exectest.Current().Stdin), os.Stdout); err != nil { //nolint:forbidigo // a plugin process: no test here
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		return 1
	}
	return 0
}

// kubeletNode is the node of TestKubeletImageCredentialProviders and what it pulls from.
type kubeletNode struct {
	cp        *framework.ControlPlane
	node      *framework.Node
	admin     *kubernetes.Clientset
	reg       *registrytest.Registry
	digest    ggcrv1.Hash
	exchange  *tokenExchange
	configDir string
	binDir    string
	fakes     map[string]*exectest.Plugin // by provider name
}

// TestKubeletImageCredentialProviders runs kplug's image credential providers in the real
// kubelet (v1.36.3, with containerd 2 and runc), registered as a Node against kube-apiserver
// with the Node authorizer and NodeRestriction: pods whose service accounts carry the
// providers' annotations pull a password-protected image from a real registry, with a
// token the kubelet requested for them.
func TestKubeletImageCredentialProviders(t *testing.T) {
	n := startKubeletNode(t)
	t.Run("token-exchange", n.testTokenExchange)
	t.Run("sdk-plugin", n.testSDKPlugin)
	t.Run("presets", n.testPresets)
	t.Run("cache-type", n.testCacheType)
	t.Run("pull-verification", n.testPullVerification)
	t.Run("faults", n.testFaults)
}

// The image hosts of the test providers: containerd sends them all to the one registry.
var testHosts = []string{"sdk.kplug.test", "sa-cache.kplug.test", "token-cache.kplug.test",
	"hang.kplug.test", "crash.kplug.test", "garbage.kplug.test", "refused.kplug.test"}

func startKubeletNode(t *testing.T) *kubeletNode {
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{Flags: []string{
		"--authorization-mode=Node",
		"--enable-admission-plugins=NodeRestriction",
	}}}})
	ctx := t.Context()
	n := &kubeletNode{cp: cp, admin: clientFor(t, cp, cp.Admin, 0), reg: startRegistry(t),
		configDir: t.TempDir(), binDir: t.TempDir(), fakes: map[string]*exectest.Plugin{}}

	// The private image: test/e2e/testimage, pushed under each repository the pods name.
	prog, err := framework.BuildTestImageProgram(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	img, err := framework.StaticImage(prog, "app")
	if err != nil {
		t.Fatal(err)
	}
	if n.digest, err = img.Digest(); err != nil {
		t.Fatal(err)
	}
	for _, repo := range []string{"team/app:v1", "my-project/team/app:v1", "app:v1"} {
		if err := n.reg.PushImage(ctx, n.reg.Host+"/"+repo, img); err != nil {
			t.Fatal(err)
		}
	}
	hosts := map[string]string{"registry.example": n.reg.Host}
	for _, h := range testHosts {
		hosts[h] = n.reg.Host
	}

	// The docs' provider, kplug's token exchange, as the docs give it but for the endpoint.
	n.exchange = startTokenExchange(t, n.admin, n.reg.PullerPassword)
	buildBinary(t, n.binDir, "./cmd/kplug", "kplug")
	doc, err := os.ReadFile(filepath.Join(nodeDocsDir, "kplug-token-exchange.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(string(doc), docsEndpoint); c != 1 {
		t.Fatalf("the docs' provider names %s %d times, want once", docsEndpoint, c)
	}
	writeFile(t, filepath.Join(n.configDir, "10-kplug-token-exchange.yaml"), strings.Replace(string(doc), docsEndpoint, n.exchange.url, 1))

	// The test's own providers: the SDK plugin, two counting ones, and faulty ones.
	var providers []kubeletv1.CredentialProvider
	fake := func(name, host string, tokens *kubeletv1.ServiceAccountTokenAttributes, env ...kubeletv1.ExecEnvVar) *exectest.Plugin {
		f := exectest.New(t)
		n.fakes[name] = f
		if err := os.Symlink(f.Path(), filepath.Join(n.binDir, name)); err != nil {
			t.Fatal(err)
		}
		env = append(env, providerEnv(f)...)
		providers = append(providers, kubeletv1.CredentialProvider{Name: name, MatchImages: []string{host},
			DefaultCacheDuration: &metav1.Duration{Duration: 10 * time.Minute}, APIVersion: "credentialprovider.kubelet.k8s.io/v1",
			Env: env, TokenAttributes: tokens})
		return f
	}
	tokenFor := func(audience string, cacheType kubeletv1.ServiceAccountTokenCacheType) *kubeletv1.ServiceAccountTokenAttributes {
		require := true
		return &kubeletv1.ServiceAccountTokenAttributes{ServiceAccountTokenAudience: audience, CacheType: cacheType, RequireServiceAccount: &require}
	}
	puller := fmt.Sprintf(`{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","auth":{"%%s":{"username":"puller","password":%q}}}`, n.reg.PullerPassword)
	fake("sdk-plugin", "sdk.kplug.test", tokenFor("sdk.kplug.test", kubeletv1.ServiceAccountServiceAccountTokenCacheType),
		kubeletv1.ExecEnvVar{Name: sdkPluginEnv, Value: "puller:" + n.reg.PullerPassword}).Behaviour("sdk-plugin")
	fake("count-sa", "sa-cache.kplug.test", tokenFor("sa-cache.kplug.test", kubeletv1.ServiceAccountServiceAccountTokenCacheType)).
		Stdout(fmt.Sprintf(puller, "sa-cache.kplug.test"))
	fake("count-token", "token-cache.kplug.test", tokenFor("token-cache.kplug.test", kubeletv1.TokenServiceAccountTokenCacheType)).
		Stdout(fmt.Sprintf(puller, "token-cache.kplug.test"))
	fake("hang", "hang.kplug.test", nil).Sleep(90 * time.Second).Stdout(fmt.Sprintf(puller, "hang.kplug.test"))
	fake("crash", "crash.kplug.test", nil).Stderr("crash: cannot reach the cloud\n").Exit(2)
	fake("garbage", "garbage.kplug.test", nil).Stdout("this is not a CredentialProviderResponse")
	fake("refused", "refused.kplug.test", nil).
		Stdout(`{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","auth":{"refused.kplug.test":{"username":"puller","password":"not-the-password"}}}`)
	writeProviders(t, filepath.Join(n.configDir, "20-test.yaml"), providers)

	// The presets of the clouds' plugins, as documented, with their fakes' environment.
	for _, p := range cloudPresets() {
		cfg, f := loadPreset(t, p)
		n.fakes[p.plugin] = f
		if err := os.Symlink(f.Path(), filepath.Join(n.binDir, p.plugin)); err != nil {
			t.Fatal(err)
		}
		writeProviders(t, filepath.Join(n.configDir, "30-"+p.name+".yaml"), cfg.Providers)
		host, _, _ := strings.Cut(p.image, "/")
		hosts[host] = n.reg.Host
		n.reg.AddUser(p.user, p.password)
	}

	// kplug validates the very directory the kubelet reads.
	var stdout, stderr bytes.Buffer
	if code := cli.Run(ctx, []string{"image-credential", "validate", "--config", n.configDir},
		cli.IO{In: strings.NewReader(""), Out: &stdout, Err: &stderr}); code != cli.ExitOK {
		t.Fatalf("kplug image-credential validate: exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	t.Logf("kplug image-credential validate: %s", strings.TrimSpace(stdout.String()))

	n.node = framework.StartNodeForTest(t, cp, framework.NodeOptions{
		ImageCredentialProviderConfig: n.configDir,
		ImageCredentialProviderBinDir: n.binDir,
		RegistryHosts:                 hosts,
	})
	return n
}

func writeProviders(t *testing.T, path string, providers []kubeletv1.CredentialProvider) {
	t.Helper()
	b, err := yaml.Marshal(kubeletv1.CredentialProviderConfig{
		TypeMeta:  metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1", Kind: "CredentialProviderConfig"},
		Providers: providers,
	})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(b))
}

// testTokenExchange is scenario 1: the docs' provider, kplug's token exchange, gets a token
// of the pod's service account for its audience, bound to the pod, once the docs' RBAC
// lets the node request that audience; before, the kubelet cannot get the token, the
// plugin never runs, and the pull fails.
func (n *kubeletNode) testTokenExchange(t *testing.T) {
	ctx := t.Context()
	ns := "exchange"
	mustCreate(t, n.admin, ns)
	createServiceAccount(ctx, t, n.admin, ns, "puller", map[string]string{identityKey: "team-a"})
	image := "registry.example/team/app:v1"

	pod := n.createPod(ctx, t, ns, "before-rbac", "puller", image, corev1.PullIfNotPresent)
	n.waitWaiting(ctx, t, pod, "ErrImagePull", "ImagePullBackOff")
	if calls := n.exchange.Calls(); len(calls) != 0 {
		t.Fatalf("before the RBAC the token endpoint was called %d times", len(calls))
	}
	// Gone before the RBAC is applied, so that no retry of its pull gets a token.
	n.deletePod(ctx, t, pod)
	line := n.providerFailure(t, "kplug")
	if want := "is not authorized to request tokens for this audience"; !strings.Contains(line, want) {
		t.Errorf("the kubelet's log does not say why it got no token (%q): %s", want, line)
	}

	kubectlApply(t, n.cp, "-f", filepath.Join(nodeDocsDir, "node-rbac.yaml"))
	pod = n.createPod(ctx, t, ns, "app", "puller", image, corev1.PullIfNotPresent)
	running := n.waitRunning(ctx, t, pod)
	n.checkImage(t, running)
	got := n.exchange.only(t)
	checkToken(t, got.subject, registryAudience, running)
	if got.user != "system:serviceaccount:exchange:puller" || got.audience != "registry" {
		t.Errorf("the exchange saw user %q, audience %q", got.user, got.audience)
	}
}

// testSDKPlugin is scenario 2, first half: a plugin written with imagecred/plugin.
func (n *kubeletNode) testSDKPlugin(t *testing.T) {
	ctx := t.Context()
	ns := "sdk"
	mustCreate(t, n.admin, ns)
	applyAudienceRBAC(t, n.cp, "sdk.kplug.test")
	createServiceAccount(ctx, t, n.admin, ns, "puller", nil)
	pod := n.waitRunning(ctx, t, n.createPod(ctx, t, ns, "app", "puller", "sdk.kplug.test/team/app:v1", corev1.PullIfNotPresent))
	n.checkImage(t, pod)
	calls := n.fakes["sdk-plugin"].Calls()
	if len(calls) != 1 {
		t.Fatalf("the SDK plugin ran %d times, want 1", len(calls))
	}
	checkToken(t, requestToken(t, calls[0].Stdin), "sdk.kplug.test", pod)
}

// testPresets is scenario 2, second half: each documented preset of a cloud's plugin, its
// config and RBAC as they are, with a fake of the plugin that checks what the real one
// checks; the registry accepts the credentials the real plugin's answer stands for.
func (n *kubeletNode) testPresets(t *testing.T) {
	for _, p := range cloudPresets() {
		t.Run(p.name, func(t *testing.T) {
			ctx := t.Context()
			mustCreate(t, n.admin, p.namespace)
			kubectlApply(t, n.cp, "-f", filepath.Join(presetDir, p.name+"-rbac.yaml"))
			createServiceAccount(ctx, t, n.admin, p.namespace, "puller", p.annotations)
			pod := n.waitRunning(ctx, t, n.createPod(ctx, t, p.namespace, "app", "puller", p.image, corev1.PullIfNotPresent))
			n.checkImage(t, pod)
			calls := n.fakes[p.plugin].Calls()
			if len(calls) != 1 {
				t.Fatalf("%s ran %d times, want 1", p.plugin, len(calls))
			}
			var req fakeRequest
			if err := json.Unmarshal([]byte(calls[0].Stdin), &req); err != nil {
				t.Fatal(err)
			}
			checkToken(t, req.ServiceAccountToken, p.audience, pod)
			if fmt.Sprint(req.ServiceAccountAnnotations) != fmt.Sprint(p.passed) {
				t.Errorf("annotations passed: %v, want %v", req.ServiceAccountAnnotations, p.passed)
			}
		})
	}
}

// testCacheType is scenario 3: two pods of one service account cause one plugin run with
// cacheType ServiceAccount (the answer is kept for the account) and two with Token (kept
// for the token, which the kubelet requests per pod). imagePullPolicy Always makes the
// kubelet look credentials up for each pod.
func (n *kubeletNode) testCacheType(t *testing.T) {
	ctx := t.Context()
	ns := "cache"
	mustCreate(t, n.admin, ns)
	createServiceAccount(ctx, t, n.admin, ns, "puller", nil)
	for _, c := range []struct {
		provider, host string
		runs           int
	}{{"count-sa", "sa-cache.kplug.test", 1}, {"count-token", "token-cache.kplug.test", 2}} {
		applyAudienceRBAC(t, n.cp, c.host)
		for i := range 2 {
			name := fmt.Sprintf("%s-%d", c.provider, i)
			n.waitRunning(ctx, t, n.createPod(ctx, t, ns, name, "puller", c.host+"/team/app:v1", corev1.PullAlways))
		}
		if runs := n.fakes[c.provider].Runs(); runs != c.runs {
			t.Errorf("%s: two pods of one service account ran the plugin %d times, want %d", c.provider, runs, c.runs)
		}
	}
}

// testPullVerification is scenario 4: with KubeletEnsureSecretPulledImages (on by
// default), a pod may use an image already on the node only with credentials of its own;
// kplug's decision (image-credential get --pull-policy --image-present --verify-access)
// for each pod is set beside what the kubelet did.
func (n *kubeletNode) testPullVerification(t *testing.T) {
	ctx := t.Context()
	ns := "verify"
	mustCreate(t, n.admin, ns)
	// The image is pulled by "puller"; "stranger" has no identity annotation, so no
	// credentials; "other" has one of its own.
	createServiceAccount(ctx, t, n.admin, ns, "puller", map[string]string{identityKey: "team-a"})
	createServiceAccount(ctx, t, n.admin, ns, "stranger", nil)
	createServiceAccount(ctx, t, n.admin, ns, "other", map[string]string{identityKey: "team-b"})
	image := "registry.example/team/app:v1"
	// The image may be on the node from the token-exchange case, pulled for another
	// namespace's account: "first" pulls or verifies it for puller here, and so is recorded.
	n.waitRunning(ctx, t, n.createPod(ctx, t, ns, "first", "puller", image, corev1.PullAlways))

	for _, c := range []struct {
		pod, sa string
		policy  corev1.PullPolicy
		image   string
		present bool
		// What the kubelet's pull records say: the account is not among those the
		// present image was pulled for, so its access must be verified.
		verify  bool
		runs    bool   // the kubelet runs the container
		kplug   int    // kplug's exit code
		lookups bool   // credentials are looked up (kplug runs the plugin; the kubelet calls the exchange)
		reason  string // the container's waiting reason, when it does not run
	}{
		{pod: "same-account", sa: "puller", policy: corev1.PullIfNotPresent, image: image, present: true, runs: true, kplug: 0},
		{pod: "no-access", sa: "stranger", policy: corev1.PullIfNotPresent, image: image, present: true, verify: true, kplug: 1, lookups: true, reason: "ErrImagePull"},
		{pod: "own-access", sa: "other", policy: corev1.PullIfNotPresent, image: image, present: true, verify: true, runs: true, kplug: 0, lookups: true},
		{pod: "never-absent", sa: "puller", policy: corev1.PullNever, image: "registry.example/team/app:absent", kplug: 1, reason: "ErrImageNeverPull"},
	} {
		t.Run(c.pod, func(t *testing.T) {
			exchanges := len(n.exchange.Calls())
			pod := n.createPod(ctx, t, ns, c.pod, c.sa, c.image, c.policy)
			if c.runs {
				n.waitRunning(ctx, t, pod)
			} else {
				n.waitWaiting(ctx, t, pod, c.reason, "ImagePullBackOff")
			}
			kubeletLookedUp := len(n.exchange.Calls()) > exchanges
			// The kubelet may look up and fail before calling the exchange (no annotation).
			if c.sa != "stranger" && kubeletLookedUp != c.lookups {
				t.Errorf("the kubelet called the token exchange: %t, want %t", kubeletLookedUp, c.lookups)
			}

			args := []string{"image-credential", "get", c.image, "--config", n.configDir, "--bin-dir", n.binDir,
				"--kubeconfig", n.cp.Admin.Kubeconfig, "--pod", ns + "/" + c.pod, "--pull-policy", string(c.policy)}
			if c.present {
				args = append(args, "--image-present")
			}
			if c.verify {
				args = append(args, "--verify-access")
			}
			exchanges = len(n.exchange.Calls())
			var stdout, stderr bytes.Buffer
			code := cli.Run(ctx, args, cli.IO{In: strings.NewReader(""), Out: &stdout, Err: &stderr})
			kplugLookedUp := len(n.exchange.Calls()) > exchanges
			t.Logf("kubelet: runs=%t; kplug get: exit %d, %s%s", c.runs, code, strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String()))
			if code != c.kplug {
				t.Errorf("kplug image-credential get: exit %d, want %d", code, c.kplug)
			}
			if c.sa != "stranger" && kplugLookedUp != c.lookups {
				t.Errorf("kplug called the token exchange: %t, want %t", kplugLookedUp, c.lookups)
			}
			// Agreement: kplug hands out credentials exactly where the kubelet runs the
			// container after a lookup, and none where the kubelet refuses it.
			hasCreds := strings.Contains(stdout.String(), `"password"`)
			if hasCreds != (c.runs && c.lookups) {
				t.Errorf("kplug printed credentials: %t; the kubelet ran the container after a lookup: %t", hasCreds, c.runs && c.lookups)
			}
		})
	}
}

// testFaults is scenario 5: providers that hang, crash, print garbage or return
// credentials the registry refuses. The kubelet logs the provider's failure, pulls without
// its credentials (the registry refuses), keeps the pod waiting and retries; kplug says of
// the same plugin what went wrong.
func (n *kubeletNode) testFaults(t *testing.T) {
	for _, c := range []struct {
		provider string
		kubelet  string // in the kubelet's log line for the provider's failure
		event    string // in the pod's events
		reruns   bool   // the kubelet's retries run the plugin again
		kplug    int    // kplug image-credential get's exit code
		kplugErr string // in its stderr
	}{
		{"crash", "exit status 2", "no basic auth credentials", true,
			1, `provider "crash" (` /* then the path */},
		{"garbage", "error reading GVK from response", "no basic auth credentials", true,
			1, `error reading GVK from response: couldn't get version/kind`},
		// The answer is cached (defaultCacheDuration): every retry pulls with the refused
		// credentials until it expires, without running the plugin again.
		{"refused", "", "401 Unauthorized", false, 0, ""},
		{"hang", "context deadline exceeded", "no basic auth credentials", false,
			1, `timed out after 1m0s and was killed`},
	} {
		t.Run(c.provider, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			ns := "fault-" + c.provider
			mustCreate(t, n.admin, ns)
			createServiceAccount(ctx, t, n.admin, ns, "default", nil)
			image := c.provider + ".kplug.test/team/app:v1"

			// kplug runs the same plugin meanwhile (the hanging one takes its minute).
			type result struct {
				code           int
				stdout, stderr string
			}
			kplug := make(chan result, 1)
			go func() {
				fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				var stdout, stderr bytes.Buffer
				code := cli.Run(fctx, []string{"image-credential", "get", image, "--config", n.configDir, "--bin-dir", n.binDir},
					cli.IO{In: strings.NewReader(""), Out: &stdout, Err: &stderr})
				kplug <- result{code, stdout.String(), stderr.String()}
			}()

			fake := n.fakes[c.provider]
			pod := n.createPod(ctx, t, ns, "app", "default", image, corev1.PullIfNotPresent)
			n.waitWaiting(ctx, t, pod, "ErrImagePull", "ImagePullBackOff")
			if c.kubelet != "" {
				if line := n.providerFailure(t, c.provider); !strings.Contains(line, c.kubelet) {
					t.Errorf("the kubelet's log for the provider's failure does not say %q: %s", c.kubelet, line)
				}
			}
			// The kubelet retries the pull after its back-off (10 s, then doubling).
			n.waitFor(ctx, t, pod, "retried", func(*corev1.Pod) bool {
				return n.pullFailures(ctx, pod) >= 2 || c.provider == "hang"
			})
			events := n.podEvents(ctx, t, pod)
			if !strings.Contains(events, c.event) {
				t.Errorf("the pod's events do not say %q:\n%s", c.event, events)
			}
			runs := fake.Runs() // kplug's run included
			t.Logf("plugin runs: %d; events:\n%s", runs, events)
			r := <-kplug
			t.Logf("kplug image-credential get: exit %d: %s%s", r.code, r.stdout, r.stderr)
			if r.code != c.kplug || !strings.Contains(r.stderr, c.kplugErr) {
				t.Errorf("kplug image-credential get: exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, c.kplug, c.kplugErr)
			}
			if c.provider != "hang" && c.reruns != (runs > 2) {
				t.Errorf("the plugin ran %d times (one of them kplug's) over the kubelet's retries; want reruns %t", runs, c.reruns)
			}
		})
	}
}

// klogEntry starts each entry of the kubelet's log; an entry whose values hold newlines
// (a plugin's stderr in an error) runs over several lines.
var klogEntry = regexp.MustCompile(`(?m)^[IWEF]\d{4} `)

// providerFailure is the kubelet's log entry saying that provider failed.
func (n *kubeletNode) providerFailure(t *testing.T, provider string) string {
	t.Helper()
	deadline := time.Now().Add(nodeTimeout)
	for {
		log := n.node.KubeletLog()
		starts := klogEntry.FindAllStringIndex(log, -1)
		for i, st := range starts {
			end := len(log)
			if i+1 < len(starts) {
				end = starts[i+1][0]
			}
			entry := log[st[0]:end]
			if strings.Contains(entry, "Failed to provide credentials for image") && strings.Contains(entry, `provider="`+provider+`"`) {
				return entry
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kubelet logged no failure of provider %q", provider)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pullFailures is how many times the kubelet reported a failed pull for the pod.
func (n *kubeletNode) pullFailures(ctx context.Context, pod *corev1.Pod) int {
	list, err := n.admin.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
	if err != nil {
		return 0
	}
	total := 0
	for _, e := range list.Items {
		if strings.HasPrefix(e.Message, "Failed to pull image") {
			total += int(max(e.Count, 1))
		}
	}
	return total
}

// createPod creates a pod on the node: host network (no CNI), no API token mounted.
func (n *kubeletNode) createPod(ctx context.Context, t *testing.T, ns, name, sa, image string, policy corev1.PullPolicy) *corev1.Pod {
	t.Helper()
	automount := false
	grace := int64(0)
	p, err := n.admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName: n.node.Name, HostNetwork: true, ServiceAccountName: sa,
			AutomountServiceAccountToken: &automount, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "app", Image: image, ImagePullPolicy: policy}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// deletePod deletes the pod at once and waits until it is gone.
func (n *kubeletNode) deletePod(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	grace := int64(0)
	if err := n.admin.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(nodeTimeout)
	for {
		_, err := n.admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not gone after %v", pod.Namespace, pod.Name, nodeTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nodeTimeout bounds each wait for the kubelet: a pull, or a plugin's one-minute timeout.
const nodeTimeout = 3 * time.Minute

func (n *kubeletNode) waitFor(ctx context.Context, t *testing.T, pod *corev1.Pod, what string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(nodeTimeout)
	for {
		p, err := n.admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && done(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for pod %s/%s to be %s: %v %+v\nevents:\n%s", nodeTimeout, pod.Namespace, pod.Name, what, err, p.Status.ContainerStatuses, n.podEvents(ctx, t, pod))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (n *kubeletNode) waitRunning(ctx context.Context, t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	return n.waitFor(ctx, t, pod, "running", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
}

// waitWaiting waits until the pod's container waits for one of reasons.
func (n *kubeletNode) waitWaiting(ctx context.Context, t *testing.T, pod *corev1.Pod, reasons ...string) *corev1.Pod {
	t.Helper()
	return n.waitFor(ctx, t, pod, "waiting ("+strings.Join(reasons, ", ")+")", func(p *corev1.Pod) bool {
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
			return false
		}
		reason := p.Status.ContainerStatuses[0].State.Waiting.Reason
		for _, r := range reasons {
			if r == reason {
				return true
			}
		}
		return false
	})
}

// checkImage: the container runs the pushed image.
func (n *kubeletNode) checkImage(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	id := pod.Status.ContainerStatuses[0].ImageID
	if !strings.HasSuffix(id, "@"+n.digest.String()) {
		t.Errorf("container image %s, want the pushed %s", id, n.digest)
	}
}

// podEvents is the pod's events, one "reason: message" per line.
func (n *kubeletNode) podEvents(ctx context.Context, t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	list, err := n.admin.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		fmt.Fprintf(&b, "%s (x%d): %s\n", e.Reason, max(e.Count, 1), e.Message)
	}
	return b.String()
}

// requestToken is the service-account token of a CredentialProviderRequest.
func requestToken(t *testing.T, stdin string) string {
	t.Helper()
	var req fakeRequest
	if err := json.Unmarshal([]byte(stdin), &req); err != nil {
		t.Fatal(err)
	}
	return req.ServiceAccountToken
}

// applyAudienceRBAC lets nodes request tokens for audience, as the docs' node-rbac.yaml
// does for registry.example.
func applyAudienceRBAC(t *testing.T, cp *framework.ControlPlane, audience string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(nodeDocsDir, "node-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ReplaceAll(audience, ".", "-")
	rbac := strings.ReplaceAll(strings.ReplaceAll(string(doc), "registry.example", audience), "kplug-credential-provider", name)
	file := filepath.Join(t.TempDir(), "rbac.yaml")
	writeFile(t, file, rbac)
	kubectlApply(t, cp, "-f", file)
}

// TestKubeletNodeDocumented keeps docs/image-credentials.md quoting the node's files as
// they are: what TestKubeletImageCredentialProviders runs is what users copy.
func TestKubeletNodeDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/image-credentials.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kplug-token-exchange.yaml", "node-rbac.yaml"} {
		b, err := os.ReadFile(filepath.Join(nodeDocsDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "```yaml\n"+string(b)+"```\n") {
			t.Errorf("docs/image-credentials.md does not quote %s as it is", name)
		}
	}
}
