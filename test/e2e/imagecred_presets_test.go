package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubeletv1 "k8s.io/kubelet/config/v1"

	"github.com/kplug/kplug/imagecred"
	"github.com/kplug/kplug/imagecred/kubeapi"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/test/e2e/framework"
)

const (
	presetDir = "../../docs/image-credential-presets"
	nodeName  = "kplug-node"
)

// presetCase is one preset of docs/image-credential-presets: its config and RBAC files,
// and what the pod's service account carries.
type presetCase struct {
	name, plugin, image, audience, namespace string
	annotations                              map[string]string // on the service account
	passed                                   map[string]string // what the plugin must get of them
	env                                      func(t *testing.T) []kubeletv1.ExecEnvVar
	check                                    func(t *testing.T, creds []imagecred.Credential)
	key, user, password                      string // the cloud presets' answer: a credential for key
}

// TestImageCredentialPresets runs each documented preset as the kubelet would, against a
// real kube-apiserver with the Node authorizer and NodeRestriction: the node's identity
// reads the pod and its service account and requests the token, the fake of the preset's
// plugin checks what the real plugin requires, and the token it got is checked against the
// preset's audience and the pod. Before the preset's RBAC is applied the apiserver refuses
// the node a token for that audience, and no plugin runs; after, the lookup succeeds.
func TestImageCredentialPresets(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{Flags: []string{
		"--authorization-mode=Node",
		"--enable-admission-plugins=NodeRestriction",
		// crio-credential-provider's token must be one the apiserver itself accepts.
		"--api-audiences=https://kubernetes.default.svc.cluster.local,https://kubernetes.default.svc",
	}}}})
	admin := clientFor(t, cp, cp.Admin, 0)
	nodeCert, err := cp.PKI.ClientCA.IssueClient("node", "system:node:"+nodeName, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	node := clientFor(t, cp, &framework.User{Name: "system:node:" + nodeName, Cert: nodeCert}, 0)

	crioAuthDir := t.TempDir()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	writeFile(t, caFile, string(cp.PKI.ClusterCA.CertPEM))
	presets := append(cloudPresets(), presetCase{
		name: "crio", plugin: "crio-credential-provider", image: "docker.io/library/nginx:latest",
		audience: "https://kubernetes.default.svc", namespace: "team",
		env: func(*testing.T) []kubeletv1.ExecEnvVar {
			return []kubeletv1.ExecEnvVar{{Name: "FAKE_KUBE_APISERVER", Value: cp.Servers[0].URL},
				{Name: "FAKE_KUBE_CA_FILE", Value: caFile}, {Name: "FAKE_CRIO_AUTH_DIR", Value: crioAuthDir}}
		},
		check: func(t *testing.T, creds []imagecred.Credential) {
			if len(creds) != 0 {
				t.Errorf("credentials %+v; crio-credential-provider answers with none", creds)
			}
			// What the plugin wrote for CRI-O: the namespace's pull secret, read with the pod's token.
			file := filepath.Join(crioAuthDir, fmt.Sprintf("team-%x.json", sha256.Sum256([]byte("docker.io/library/nginx"))))
			b, err := os.ReadFile(file)
			if err != nil || !strings.Contains(string(b), `"mirror.example:5000":{"auth":"`) {
				t.Errorf("CRI-O auth file %s: %s, %v", file, b, err)
			}
		},
	})

	for _, p := range presets {
		t.Run(p.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cfg, fake := loadPreset(t, p)
			mustCreate(t, admin, p.namespace)
			pod := createPodOnNode(ctx, t, admin, p.namespace, "app", "puller", p.image, p.annotations)
			if p.name == "crio" {
				createPullSecret(ctx, t, admin, p.namespace)
			}
			keyring, err := imagecred.New(imagecred.Options{Config: cfg, BinDir: filepath.Dir(fakePath(t, fake, p.plugin)),
				ServiceAccounts: kubeapi.NewServiceAccounts(node, kubeapi.Options{LookupTTL: -1})})
			if err != nil {
				t.Fatal(err)
			}
			// The node authorizer learns of the pod from its informers.
			var podRef *imagecred.Pod
			poll.Until(t, "the node to be allowed to read its pod", func() bool {
				podRef, err = kubeapi.GetPod(ctx, node, p.namespace, "app")
				return err == nil
			})

			// Without the preset's RBAC the apiserver refuses the node a token for the audience.
			_, err = keyring.Lookup(ctx, p.image, podRef)
			want := fmt.Sprintf("audience %q not found in pod spec volume, system:node:%s is not authorized to request tokens for this audience", p.audience, nodeName)
			if err == nil || !strings.Contains(err.Error(), want) || fake.Runs() != 0 {
				t.Fatalf("before the RBAC: %v, %d plugin runs; want %q and none", err, fake.Runs(), want)
			}
			kubectlApply(t, cp, "-f", filepath.Join(presetDir, p.name+"-rbac.yaml"))

			var creds []imagecred.Credential
			poll.Until(t, "the preset's RBAC to let the node request the token", func() bool {
				creds, err = keyring.Lookup(ctx, p.image, podRef)
				return err == nil || !strings.Contains(err.Error(), "not authorized to request tokens")
			})
			if err != nil {
				t.Fatalf("lookup with the preset's RBAC: %v", err)
			}
			p.check(t, creds)

			// What the plugin got: the preset's audience, bound to the pod, and only the
			// annotations the preset names.
			calls := fake.Calls()
			if len(calls) != 1 {
				t.Fatalf("the plugin ran %d times, want 1", len(calls))
			}
			var req fakeRequest
			if err := json.Unmarshal([]byte(calls[0].Stdin), &req); err != nil {
				t.Fatal(err)
			}
			checkToken(t, req.ServiceAccountToken, p.audience, pod)
			if !cmp.Equal(req.ServiceAccountAnnotations, p.passed) {
				t.Errorf("annotations passed: %v, want %v", req.ServiceAccountAnnotations, p.passed)
			}
		})
	}

	// kplug run by an identity that is not a node needs kplug-rbac.yaml as it is, and
	// nothing more: its namespace, its service account and its subject.
	t.Run("kplug-rbac", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cfg, fake := loadPreset(t, presets[0])
		ns, subject := "apps", "kplug-image-credentials"
		mustCreate(t, admin, ns)
		createPodOnNode(ctx, t, admin, ns, "app", "puller", presets[0].image, presets[0].annotations)
		cert, err := cp.PKI.ClientCA.IssueClient("kplug-image-credentials", subject)
		if err != nil {
			t.Fatal(err)
		}
		kplug := clientFor(t, cp, &framework.User{Name: subject, Cert: cert}, 0)
		keyring, err := imagecred.New(imagecred.Options{Config: cfg, BinDir: filepath.Dir(fakePath(t, fake, presets[0].plugin)),
			ServiceAccounts: kubeapi.NewServiceAccounts(kplug, kubeapi.Options{LookupTTL: -1})})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kubeapi.GetPod(ctx, kplug, ns, "app"); err == nil {
			t.Fatalf("%s read the pod without any RBAC", subject)
		}
		kubectlApply(t, cp, "-f", filepath.Join(presetDir, "kplug-rbac.yaml"))
		var creds []imagecred.Credential
		poll.Until(t, "the preset's RoleBinding to take effect", func() bool {
			pod, err := kubeapi.GetPod(ctx, kplug, ns, "app")
			if err != nil {
				return false
			}
			creds, err = keyring.Lookup(ctx, presets[0].image, pod)
			return err == nil
		})
		presets[0].check(t, creds)
	})
}

// cloudPresets are the presets of the clouds' plugins, which answer with credentials
// (crio-credential-provider, for CRI-O, writes them to a file instead).
func cloudPresets() []presetCase {
	presets := []presetCase{{
		name: "ecr", plugin: "ecr-credential-provider", image: "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/app:v1",
		audience: "sts.amazonaws.com", namespace: "ecr",
		annotations: map[string]string{"eks.amazonaws.com/ecr-role-arn": "arn:aws:iam::123456789012:role/puller", "other": "x"},
		passed:      map[string]string{"eks.amazonaws.com/ecr-role-arn": "arn:aws:iam::123456789012:role/puller"},
		key:         "123456789012.dkr.ecr.eu-west-1.amazonaws.com", user: "AWS",
		password: "ecr-token-as-web-identity:arn:aws:iam::123456789012:role/puller",
	}, {
		name: "gcp", plugin: "auth-provider-gcp", image: "europe-docker.pkg.dev/my-project/team/app:v1",
		audience: "my-project.svc.id.goog", namespace: "gcp",
		annotations: map[string]string{"iam.gke.io/enable-wi-image-pull": "true", "iam.gke.io/gcp-service-account": "x"},
		passed:      map[string]string{"iam.gke.io/enable-wi-image-pull": "true"},
		key:         "europe-docker.pkg.dev", user: "_token",
		password: "federated-token-for-identitynamespace:my-project.svc.id.goog:https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/my-cluster",
	}, {
		name: "acr", plugin: "acr-credential-provider", image: "team.azurecr.io/app:v1",
		audience: "api://AzureADTokenExchange", namespace: "acr",
		annotations: map[string]string{"kubernetes.azure.com/acr-client-id": "22222222-2222-2222-2222-222222222222"},
		passed:      map[string]string{"kubernetes.azure.com/acr-client-id": "22222222-2222-2222-2222-222222222222"},
		key:         "team.azurecr.io", user: "00000000-0000-0000-0000-000000000000",
		password: "acr-refresh-token-as-identity-binding:22222222-2222-2222-2222-222222222222@11111111-1111-1111-1111-111111111111 via https://identity-bindings.example.internal",
	}}
	for i, p := range presets {
		presets[i].check = wantCredential(p.key, p.user, p.password)
	}
	return presets
}

// loadPreset reads the documented config, checks it is valid and names the case's plugin
// and audience, and puts a fake of the plugin in a bin directory: the config gets only the
// fake's environment (and the case's test plumbing) added.
func loadPreset(t *testing.T, p presetCase) (*imagecred.Config, *exectest.Plugin) {
	t.Helper()
	cfg, err := imagecred.LoadConfig(filepath.Join(presetDir, p.name+"-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Providers) != 1 || cfg.Providers[0].Name != p.plugin || cfg.Providers[0].TokenAttributes.ServiceAccountTokenAudience != p.audience {
		t.Fatalf("preset %s: providers %+v; want %s with audience %s", p.name, cfg.Providers, p.plugin, p.audience)
	}
	fake := exectest.New(t).Behaviour(p.plugin)
	cfg.Providers[0].Env = append(cfg.Providers[0].Env, providerEnv(fake)...)
	if p.env != nil {
		cfg.Providers[0].Env = append(cfg.Providers[0].Env, p.env(t)...)
	}
	return cfg, fake
}

// providerEnv is the fake's environment as a provider's env in a CredentialProviderConfig.
func providerEnv(fake *exectest.Plugin) []kubeletv1.ExecEnvVar {
	var env []kubeletv1.ExecEnvVar
	for _, e := range fake.Env() {
		k, v, _ := strings.Cut(e, "=")
		env = append(env, kubeletv1.ExecEnvVar{Name: k, Value: v})
	}
	return env
}

// fakePath links the fake into a new bin directory under the plugin's name.
func fakePath(t *testing.T, fake *exectest.Plugin, plugin string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), plugin)
	if err := os.Symlink(fake.Path(), path); err != nil {
		t.Fatal(err)
	}
	return path
}

func wantCredential(key, user, password string) func(*testing.T, []imagecred.Credential) {
	return func(t *testing.T, creds []imagecred.Credential) {
		t.Helper()
		if len(creds) == 0 || creds[0].Key != key || creds[0].Username != user || creds[0].Password != password {
			t.Errorf("credentials %+v; want first %s %s:%s", creds, key, user, password)
		}
	}
}

// checkToken: a token from the apiserver for the audience, bound to the pod, for its
// service account.
func checkToken(t *testing.T, token, audience string, pod *corev1.Pod) {
	t.Helper()
	claims := jwtClaims(t, token)
	if aud, _ := claims["aud"].([]any); len(aud) != 1 || aud[0] != audience {
		t.Errorf("token audience %v, want [%s]", claims["aud"], audience)
	}
	k8s, _ := claims["kubernetes.io"].(map[string]any)
	podClaim, _ := k8s["pod"].(map[string]any)
	saClaim, _ := k8s["serviceaccount"].(map[string]any)
	if podClaim["name"] != pod.Name || podClaim["uid"] != string(pod.UID) || saClaim["name"] != pod.Spec.ServiceAccountName || k8s["namespace"] != pod.Namespace {
		t.Errorf("token claims %v; want pod %s/%s (%s), service account %s", k8s, pod.Namespace, pod.Name, pod.UID, pod.Spec.ServiceAccountName)
	}
}

// createPodOnNode creates a service account with annotations and a pod using it, bound to
// the test's node.
func createPodOnNode(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, pod, sa, image string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	createServiceAccount(ctx, t, client, ns, sa, annotations)
	automount := false
	p, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod},
		Spec: corev1.PodSpec{
			NodeName:                     nodeName,
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

func createPullSecret(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	_, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "mirror-pull"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"mirror.example:5000":{"auth":"dXNlcjpwYXNz"}}}`)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// TestImageCredentialPresetsDocumented keeps docs/image-credentials.md quoting each preset
// file as it is: what TestImageCredentialPresets tests is what users copy.
func TestImageCredentialPresetsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/image-credentials.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(presetDir, "*.yaml"))
	if err != nil || len(files) != 9 {
		t.Fatalf("preset files %v, %v; want 9", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "```yaml\n"+string(b)+"```\n") {
			t.Errorf("docs/image-credentials.md does not quote %s as it is", f)
		}
	}
}
