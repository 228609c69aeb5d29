package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeletv1 "k8s.io/kubelet/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/kplug/kplug/internal/cli"
	"github.com/kplug/kplug/test/e2e/framework"
)

// nodeFlags make an apiserver authorize kubelets as a kubeadm cluster does: the Node
// authorizer (added to the framework's RBAC: the flag is a list) and the NodeRestriction
// admission plugin (which enforces ServiceAccountNodeAudienceRestriction).
var nodeFlags = []string{"--authorization-mode=Node", "--enable-admission-plugins=NodeRestriction"}

// startNodeControlPlane starts one apiserver with nodeFlags and creates what a cluster's
// controllers would have: the default service account of kube-system.
func startNodeControlPlane(t *testing.T) *framework.ControlPlane {
	t.Helper()
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{Flags: nodeFlags}}})
	admin := clientFor(t, cp, cp.Admin, 0)
	_, err := admin.CoreV1().ServiceAccounts("kube-system").Create(t.Context(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return cp
}

// kubectlApply runs kubectl apply as the admin with args (files, --dry-run=server).
func kubectlApply(t *testing.T, cp *framework.ControlPlane, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := cp.Kubectl(ctx, cp.Admin, append([]string{"apply"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kubeadmFiles writes the files of kubeadm's /etc/kubernetes, from cp's, with kubeadm's
// modes (certificates 0644, keys and kubeconfigs 0600): those the static pod reads, the
// sidecar user's kubeconfig, and keys the pod must never see.
func kubeadmFiles(t *testing.T, cp *framework.ControlPlane, etc string) {
	t.Helper()
	p := cp.PKI
	for dst, src := range map[string]string{
		"pki/apiserver.crt":          p.Serving.CertFile,
		"pki/apiserver.key":          p.Serving.KeyFile,
		"pki/ca.crt":                 p.ClientCA.File,
		"pki/front-proxy-ca.crt":     p.FrontProxyCA.File,
		"pki/front-proxy-client.crt": p.ProxyClient.CertFile,
		"pki/front-proxy-client.key": p.ProxyClient.KeyFile,
		"kplug-peerproxy.conf":       peerproxyKubeconfig(t, cp),
		// Not the pod's: stand-ins with the names kubeadm gives them.
		"pki/ca.key":                       p.ProxyClient.KeyFile,
		"pki/sa.key":                       p.ProxyClient.KeyFile,
		"pki/front-proxy-ca.key":           p.ProxyClient.KeyFile,
		"pki/etcd/ca.key":                  p.ProxyClient.KeyFile,
		"pki/apiserver-kubelet-client.key": p.ProxyClient.KeyFile,
		"admin.conf":                       cp.Admin.Kubeconfig,
	} {
		mode := os.FileMode(0o600)
		if strings.HasSuffix(dst, ".crt") {
			mode = 0o644
		}
		copyFileMode(t, src, filepath.Join(etc, dst), mode)
	}
}

// mountedFiles returns the node's files that pod mounts, the node's /etc/kubernetes
// being etc; each volume must be a hostPath of type File.
func mountedFiles(t *testing.T, pod *corev1.Pod, etc string) map[string]string {
	t.Helper()
	files := map[string]string{} // mount path in the container -> file on the node
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		v := volumes[m.Name]
		if v.HostPath == nil || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathFile {
			t.Fatalf("volume %s is not a hostPath of type File: %+v", m.Name, v.VolumeSource)
		}
		rest, ok := strings.CutPrefix(v.HostPath.Path, "/etc/kubernetes/")
		if !ok {
			t.Fatalf("volume %s mounts %s, outside /etc/kubernetes", m.Name, v.HostPath.Path)
		}
		files[m.MountPath] = filepath.Join(etc, rest)
	}
	return files
}

// buildStatic builds kplug as the release image holds it: static, without cgo.
func buildStatic(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "kplug")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/kplug")
	cmd.Dir, cmd.Env = moduleRoot(t), append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kplug: %v\n%s", err, b)
	}
	return out
}

// podArgs is the pod's command line beside apiserver i, with kubeadm's /etc/kubernetes/
// at etc and the node's addresses those of the test.
func podArgs(t *testing.T, cp *framework.ControlPlane, i int, pod *corev1.Pod, etc string) (args []string, listen, metrics string) {
	t.Helper()
	listen = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	metrics = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	replacer := strings.NewReplacer(
		"/etc/kubernetes/", etc,
		"https://$(NODE_IP):6443", cp.Servers[i].URL, // the apiserver's port here is not 6443
		"$(NODE_IP):6444", listen,
		"127.0.0.1:9444", metrics,
	)
	for _, a := range pod.Spec.Containers[0].Args {
		args = append(args, replacer.Replace(a))
		if strings.Contains(args[len(args)-1], "$(") {
			t.Fatalf("argument %q names a variable the test does not set", a)
		}
	}
	// Two sidecars on one machine: each its own Lease (the pod's default is the hostname).
	args = append(args, "--id=kplug-peerproxy-"+cp.Servers[i].Name)
	return args, listen, metrics
}

// peerproxyKubeconfig writes a kubeconfig for the user kplug-peerproxy (a client
// certificate from the cluster's client CA), as `kubeadm kubeconfig user
// --client-name=kplug-peerproxy` writes it.
func peerproxyKubeconfig(t *testing.T, cp *framework.ControlPlane) string {
	t.Helper()
	user, err := cp.PKI.ClientCA.IssueClient("kplug-peerproxy-kubeconfig", "kplug-peerproxy")
	if err != nil {
		t.Fatal(err)
	}
	return writeCertKubeconfig(t, cp, cp.Servers[0].URL, "kplug-peerproxy", user.CertPEM, user.KeyPEM)
}

// writeCertKubeconfig writes a kubeconfig for server with a client certificate.
func writeCertKubeconfig(t *testing.T, cp *framework.ControlPlane, server, user string, certPEM, keyPEM []byte) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server, cluster.CertificateAuthorityData = server, cp.PKI.ClusterCA.CertPEM
	auth := clientcmdapi.NewAuthInfo()
	auth.ClientCertificateData, auth.ClientKeyData = certPEM, keyPEM
	c := clientcmdapi.NewContext()
	c.Cluster, c.AuthInfo = "cluster", user
	cfg.Clusters["cluster"], cfg.AuthInfos[user], cfg.Contexts["default"] = cluster, auth, c
	cfg.CurrentContext = "default"
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// serverKubeconfig writes u's kubeconfig with server as its server.
func serverKubeconfig(t *testing.T, u *framework.User, server string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(u.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func readPod(t *testing.T, path string) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &pod
}

// copyFileMode copies src to dst with mode, making dst's directories (0755).
func copyFileMode(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil { // whatever the umask
		t.Fatal(err)
	}
}

// TestDeployImageCredentialProvider checks deploy/image-credential-provider against a
// control plane that authorizes nodes as kubeadm's does: kplug validates the kubelet
// config; its RBAC passes a server-side dry run; a node may not request a token for the
// provider's audience before the RBAC is applied and may after; and then, as the kubelet
// would, `kplug image-credential get` with the node's credentials and the config's
// provider (the reference token-exchange plugin, endpoint and registry made local) gets
// credentials that pull from a real registry.
func TestDeployImageCredentialProvider(t *testing.T) {
	cp := startNodeControlPlane(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := filepath.Join(moduleRoot(t), "deploy", "image-credential-provider")
	config := filepath.Join(dir, "credential-provider-config.yaml")
	rbac := filepath.Join(dir, "rbac.yaml")

	var stdout, stderr bytes.Buffer
	if code := cli.Run(ctx, []string{"image-credential", "validate", "--config", config}, cli.IO{In: strings.NewReader(""), Out: &stdout, Err: &stderr}); code != cli.ExitOK ||
		!strings.HasPrefix(stdout.String(), "valid (1 providers, ") {
		t.Fatalf("kplug image-credential validate %s: exit %d: %s%s", config, code, stdout.String(), stderr.String())
	}
	provider := readProviderConfig(t, config).Providers[0]
	audience := provider.TokenAttributes.ServiceAccountTokenAudience

	// A node with a pod of a service account that names its registry identity.
	admin := clientFor(t, cp, cp.Admin, 0)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := "team"
	mustCreate(t, admin, ns)
	annotations := map[string]string{}
	for _, k := range provider.TokenAttributes.RequiredServiceAccountAnnotationKeys {
		annotations[k] = "team-a"
	}
	createPod(ctx, t, admin, ns, "app", "puller", "registry.example/team/app:v1", annotations)
	bindPod(ctx, t, admin, ns, "app", "node-1")
	nodeCert, err := cp.PKI.ClientCA.IssueClient("node-1", "system:node:node-1", "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	nodeKubeconfig := writeCertKubeconfig(t, cp, cp.Servers[0].URL, "system:node:node-1", nodeCert.CertPEM, nodeCert.KeyPEM)
	node := kubeClientFrom(t, nodeKubeconfig)
	pod, err := node.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the node reads its pod: %v", err)
	}
	tokenRequest := func() error {
		_, err := node.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "puller", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences:      []string{audience},
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "app", UID: pod.UID},
		}}, metav1.CreateOptions{})
		return err
	}
	if err := tokenRequest(); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), audience) {
		t.Fatalf("before the RBAC, the node's TokenRequest for %q: %v; want forbidden naming the audience", audience, err)
	}
	if out := kubectlApply(t, cp, "--dry-run=server", "--validate=strict", "-f", rbac); !strings.Contains(out, "(server dry run)") {
		t.Errorf("dry run: %s", out)
	}
	kubectlApply(t, cp, "-f", rbac)
	eventually(ctx, t, "the node's TokenRequest for the audience, with the RBAC", tokenRequest)

	// The kubelet's lookup, by kplug, with the node's credentials.
	reg := startRegistry(t)
	ref := reg.Host + "/team/app:v1"
	pushed := reg.Push(t, ref, 512, 2)
	exchange := startTokenExchange(t, admin, reg.PullerPassword)
	if audience != registryAudience {
		t.Fatalf("the config's audience %q is not the one the token endpoint checks (%q)", audience, registryAudience)
	}
	local := readProviderConfig(t, config)
	p := &local.Providers[0]
	p.MatchImages = []string{reg.Host}
	for i, a := range p.Args {
		if strings.HasPrefix(a, "--endpoint=") {
			p.Args[i] = "--endpoint=" + exchange.url
		}
	}
	p.Env = append(p.Env, kubeletv1.ExecEnvVar{Name: runKplugEnv, Value: "1"})
	localConfig := filepath.Join(t.TempDir(), "credential-provider.json")
	data, err := json.Marshal(local)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, localConfig, string(data))
	binDir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(binDir, p.Name)); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	code := cli.Run(ctx, []string{"image-credential", "get", ref, "--config", localConfig, "--bin-dir", binDir,
		"--kubeconfig", nodeKubeconfig, "--pod", ns + "/app"}, cli.IO{In: strings.NewReader(""), Out: &stdout, Err: &stderr})
	if code != cli.ExitOK {
		t.Fatalf("kplug image-credential get as the node: exit %d: %s", code, stderr.String())
	}
	var got struct {
		Auths map[string]struct{ Username, Password string } `json:"auths"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	creds := got.Auths[reg.Host]
	if creds.Username != "puller" || creds.Password != reg.PullerPassword {
		t.Fatalf("credentials %+v", got.Auths)
	}
	if call := exchange.only(t); call.user != "system:serviceaccount:team:puller" {
		t.Errorf("the token endpoint saw %q", call.user)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuth(&authn.Basic{Username: creds.Username, Password: creds.Password}))
	if err != nil {
		t.Fatalf("pull with the credentials: %v", err)
	}
	if d, err := img.Digest(); err != nil || d != pushed {
		t.Errorf("pulled %v (%v), want %v", d, err, pushed)
	}
}

func readProviderConfig(t *testing.T, path string) *kubeletv1.CredentialProviderConfig {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg kubeletv1.CredentialProviderConfig
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(cfg.Providers) != 1 || cfg.Providers[0].TokenAttributes == nil {
		t.Fatalf("%s: want one provider with tokenAttributes", path)
	}
	return &cfg
}

// bindPod binds a pod to a node, as the scheduler would.
func bindPod(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, pod, node string) {
	t.Helper()
	err := client.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func kubeClientFrom(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}
