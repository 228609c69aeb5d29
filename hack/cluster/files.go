package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/internal/testkit/registrytest"
	"github.com/kplug/kplug/test/e2e/framework"
)

// What the node page finds: a node, and a pod bound to it whose service account names its
// registry identity (the annotation deploy/image-credential-provider's config requires),
// of an image in the registry.
const (
	nodeName         = "node-1"
	podRef           = "team/app"
	registryAudience = "registry.example" // the deploy config's serviceAccountTokenAudience
	identityKey      = "registry.example/identity"
)

// kubeadmFiles writes into etc the files of kubeadm's /etc/kubernetes that the pages use,
// with kubeadm's modes: admin.conf, and in pki/ the CA (which signs the serving and
// client certificates) with its key, the apiserver's serving pair, the front-proxy CA and
// client pair. It returns the CA key's file.
func kubeadmFiles(cp *framework.ControlPlane, etc string) (string, error) {
	p := cp.PKI
	if err := os.MkdirAll(filepath.Join(etc, "pki"), 0o755); err != nil { //nolint:gosec // as kubeadm's
		return "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(p.ClusterCA.Key)
	if err != nil {
		return "", err
	}
	caKey := filepath.Join(etc, "pki", "ca.key")
	if err := os.WriteFile(caKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", err
	}
	for dst, src := range map[string]string{
		"admin.conf":                 cp.Admin.Kubeconfig,
		"pki/ca.crt":                 p.ClusterCA.File,
		"pki/apiserver.crt":          p.Serving.CertFile,
		"pki/apiserver.key":          p.Serving.KeyFile,
		"pki/front-proxy-ca.crt":     p.FrontProxyCA.File,
		"pki/front-proxy-client.crt": p.ProxyClient.CertFile,
		"pki/front-proxy-client.key": p.ProxyClient.KeyFile,
	} {
		mode := os.FileMode(0o600)
		if filepath.Ext(dst) == ".crt" {
			mode = 0o644
		}
		if err := copyFile(src, filepath.Join(etc, dst), mode); err != nil {
			return "", err
		}
	}
	return caKey, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src) //nolint:gosec // the control plane's own files
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode) //nolint:gosec // into the cluster's directory
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// node is what the node page pulls from: the registry, its token endpoint, and the
// node's kubelet.conf.
type node struct {
	Registry      string // host:port
	TokenEndpoint string
	reg           *registrytest.Registry
	exchange      *registrytest.TokenExchange
}

func (n *node) Close() {
	n.exchange.Close()
	n.reg.Close()
}

// startNode starts the registry with an image, the token endpoint (which checks a
// service-account token for registryAudience with TokenReview and answers with the
// registry's puller password), creates the node, the pod bound to it and its service
// account, and writes the node's kubeconfig as etc/kubelet.conf.
func startNode(ctx context.Context, cp *framework.ControlPlane, dir, etc string) (*node, error) {
	regDir := filepath.Join(dir, "registry")
	if err := os.Mkdir(regDir, 0o700); err != nil {
		return nil, err
	}
	reg, err := registrytest.New(regDir)
	if err != nil {
		return nil, err
	}
	image := reg.Host + "/team/app:v1"
	if _, err := reg.PushRandom(ctx, image, 512, 2); err != nil {
		reg.Close()
		return nil, fmt.Errorf("pushing %s: %w", image, err)
	}
	admin, err := kubernetes.NewForConfig(cp.RESTConfig(cp.Admin, 0))
	if err != nil {
		reg.Close()
		return nil, err
	}
	n := &node{Registry: reg.Host, reg: reg, exchange: registrytest.StartTokenExchange(admin, registryAudience, reg.PullerPassword)}
	n.TokenEndpoint = n.exchange.URL + "/token"
	if err := createPod(ctx, admin, image); err != nil {
		n.Close()
		return nil, err
	}
	if err := writeKubeletConf(cp, filepath.Join(etc, "kubelet.conf")); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// createPod creates the node, the namespace team, its service account puller with its
// registry identity, and the pod app of image on the node, run as puller.
func createPod(ctx context.Context, client kubernetes.Interface, image string) error {
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		return err
	}
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
			NodeName:                     nodeName,
			ServiceAccountName:           "puller",
			AutomountServiceAccountToken: &automount,
			Containers:                   []corev1.Container{{Name: "app", Image: image}},
		},
	}, metav1.CreateOptions{})
	return err
}

// writeKubeletConf writes the node's kubeconfig: a client certificate for
// system:node:<node> in system:nodes, as a kubelet's.
func writeKubeletConf(cp *framework.ControlPlane, path string) error {
	user := "system:node:" + nodeName
	cert, err := cp.PKI.ClientCA.IssueClient(nodeName+"-kubelet", user, "system:nodes")
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server, cluster.CertificateAuthorityData = cp.Servers[0].URL, cp.PKI.ClusterCA.CertPEM
	auth := clientcmdapi.NewAuthInfo()
	auth.ClientCertificateData, auth.ClientKeyData = cert.CertPEM, cert.KeyPEM
	c := clientcmdapi.NewContext()
	c.Cluster, c.AuthInfo = "kubernetes", user
	cfg.Clusters["kubernetes"], cfg.AuthInfos[user], cfg.Contexts["default"] = cluster, auth, c
	cfg.CurrentContext = "default"
	return clientcmd.WriteToFile(*cfg, path)
}
