package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kplug/kplug/internal/testkit/registrytest"
	"github.com/kplug/kplug/test/e2e/framework"
)

// The audience of the service-account token the provider gets, and the annotation a
// service account must carry for it.
const (
	registryAudience = "registry.example"
	identityKey      = "registry.example/identity"
)

// imageCredentialDemo is KEP-4412 as the kubelet does it, by kplug: a pod's service
// account, a token the apiserver issues for the registry's audience, bound to the pod,
// kplug's reference provider plugin (written with its SDK, imagecred/plugin) trading it at
// a token endpoint that verifies it with TokenReview, and a real pull from an
// authenticating registry with only the credentials kplug printed.
func imageCredentialDemo(ctx context.Context, cp *framework.ControlPlane) error {
	fmt.Println("# Image credentials (KEP-4412): registry credentials for a pod's service account, as the kubelet gets them")
	dir := filepath.Join(cp.Dir, "image-credentials")
	binDir := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(binDir, 0o700); err != nil {
		return err
	}
	// The registry logs through logrus's standard logger, and logs as errors what clients
	// ask on purpose (a manifest before it is pushed, an anonymous pull): into its log file,
	// with the control plane's, not on the demo's terminal.
	regLog, err := os.Create(filepath.Join(dir, "registry.log")) //nolint:gosec // the demo's own directory
	if err != nil {
		return err
	}
	logrus.SetOutput(regLog)
	defer func() {
		logrus.SetOutput(os.Stderr)
		_ = regLog.Close()
	}()
	reg, err := registrytest.New(dir)
	if err != nil {
		return err
	}
	defer reg.Close()
	ref := reg.Host + "/team/app:v1"
	pushed, err := reg.PushRandom(ctx, ref, 512, 2)
	if err != nil {
		return err
	}
	admin, err := kubernetes.NewForConfig(cp.RESTConfig(cp.Admin, 0))
	if err != nil {
		return err
	}
	exchange := registrytest.StartTokenExchange(admin, registryAudience, reg.PullerPassword)
	defer exchange.Close()
	fmt.Printf("an OCI registry that wants a password: %s (image %s, log %s)\n", reg.Host, ref, regLog.Name())
	fmt.Printf("a token endpoint that checks service-account tokens with TokenReview: %s\n", exchange.URL)
	if err := createPuller(ctx, admin, ref); err != nil {
		return err
	}
	fmt.Printf("a pod team/app whose service account team/puller has the annotation %s\n\n", identityKey)

	// The plugin is kplug itself, under the provider's name, as the kubelet runs it.
	kplug := filepath.Join(cp.BinDir, "kplug")
	if err := os.Symlink(kplug, filepath.Join(binDir, "token-exchange")); err != nil {
		return err
	}
	config := filepath.Join(dir, "credential-provider.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: token-exchange
  matchImages: [%q]
  defaultCacheDuration: 5m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: [image-credential, plugin, token-exchange, --endpoint=%s, --audience=registry, --username=puller]
  tokenAttributes:
    serviceAccountTokenAudience: %s
    cacheType: ServiceAccount
    requireServiceAccount: true
    requiredServiceAccountAnnotationKeys: [%s]
`, reg.Host, exchange.URL, registryAudience, identityKey)), 0o600); err != nil {
		return err
	}
	fmt.Printf("$ cat %s\n", config)
	if data, err := os.ReadFile(config); err == nil { //nolint:gosec // the demo's own file
		fmt.Println(string(data))
	}
	if err := runSteps(ctx, [][]string{{kplug, "image-credential", "validate", "--config", config}}); err != nil {
		return err
	}
	args := []string{"image-credential", "get", ref, "--config", config, "--bin-dir", binDir, "--kubeconfig", cp.Admin.Kubeconfig, "--pod", "team/app"}
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, kplug, args...) //nolint:gosec // the demo's own binary
	fmt.Printf("$ %s\n", commandLine(cmd.Args))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("kplug image-credential get: %w", err)
	}
	fmt.Println(string(out))
	var got struct {
		Auths map[string]struct{ Username, Password string } `json:"auths"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		return err
	}
	calls := exchange.Calls()
	if len(calls) == 1 {
		fmt.Printf("the token endpoint verified a token of %s for audience %s, bound to the pod\n", calls[0].User, registryAudience)
	}
	creds := got.Auths[reg.Host]
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	if _, err := remote.Image(r, remote.WithContext(ctx)); err == nil {
		return fmt.Errorf("the registry let an anonymous client pull %s", ref)
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuth(&authn.Basic{Username: creds.Username, Password: creds.Password}))
	if err != nil {
		return fmt.Errorf("pull with the credentials kplug printed: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("pulled %s with those credentials: %s (pushed %s); anonymously: refused\n\n", ref, digest, pushed)
	return nil
}

// createPuller creates the namespace team, the service account puller with its registry
// identity, and an unscheduled pod app of image that runs as it.
func createPuller(ctx context.Context, client kubernetes.Interface, image string) error {
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "puller", Annotations: map[string]string{identityKey: "team-a"}}}
	if _, err := client.CoreV1().ServiceAccounts("team").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return err
	}
	automount := false
	_, err := client.CoreV1().Pods("team").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			ServiceAccountName:           "puller",
			AutomountServiceAccountToken: &automount,
			Containers:                   []corev1.Container{{Name: "app", Image: image}},
		},
	}, metav1.CreateOptions{})
	return err
}
