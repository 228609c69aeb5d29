package framework

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ControllerManagerOptions say which controllers a kube-controller-manager runs and where
// it sends its requests.
type ControllerManagerOptions struct {
	// Server is the URL the controllers talk to: an apiserver's, or a proxy's in front of
	// one whose serving certificate is from the cluster CA. Default: the first apiserver.
	Server string
	// Controllers is --controllers, e.g. namespace-controller,garbage-collector-controller.
	Controllers []string
	// User is who the controllers act as (all of them: no per-controller service account
	// credentials). Default: Admin.
	User *User
	// Flags are extra kube-controller-manager flags, added last.
	Flags []string
}

// ControllerManager is one running kube-controller-manager of the pinned release.
type ControllerManager struct {
	proc *process
}

// Stop shuts it down (SIGTERM, then SIGKILL after a grace period) and waits for it.
func (m *ControllerManager) Stop() { m.proc.stop(10 * time.Second) }

// LogPath is the file holding its output.
func (m *ControllerManager) LogPath() string { return m.proc.logPath }

// StartControllerManager starts kube-controller-manager with o's controllers, without
// leader election or a serving port, and returns once it has logged that its controllers
// started. ControlPlane.Stop stops it before the apiservers.
func (cp *ControlPlane) StartControllerManager(ctx context.Context, o ControllerManagerOptions) (*ControllerManager, error) {
	bin := filepath.Join(cp.BinDir, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("kube-controller-manager is missing from %s: run `make tools`: %w", cp.BinDir, err)
	}
	if o.Server == "" {
		o.Server = cp.Servers[0].URL
	}
	if o.User == nil {
		o.User = cp.Admin
	}
	name := fmt.Sprintf("kube-controller-manager-%d", len(cp.controllerManagers))
	kubeconfig := filepath.Join(cp.Dir, name+".kubeconfig")
	if err := writeKubeconfig(kubeconfig, o.Server, cp.PKI.ClusterCA.CertPEM, o.User); err != nil {
		return nil, err
	}
	argv := append([]string{bin,
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + strings.Join(o.Controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--v=2",
	}, o.Flags...)
	proc, err := startProcess(name, filepath.Join(cp.Dir, name+".log"), argv)
	if err != nil {
		return nil, err
	}
	m := &ControllerManager{proc: proc}
	cp.controllerManagers = append(cp.controllerManagers, m)
	started := func(context.Context) error {
		log := proc.tail(2000)
		for _, c := range o.Controllers {
			if !strings.Contains(log, fmt.Sprintf(`"Controller starting..." controller=%q`, c)) {
				return fmt.Errorf("%s has not started %s yet", name, c)
			}
		}
		return nil
	}
	if err := waitReady(ctx, proc, 60*time.Second, started); err != nil {
		m.Stop()
		return nil, err
	}
	return m, nil
}

// writeKubeconfig writes a kubeconfig for u against server, trusting ca.
func writeKubeconfig(path, server string, ca []byte, u *User) error {
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server, cluster.CertificateAuthorityData = server, ca
	auth := clientcmdapi.NewAuthInfo()
	auth.Token = u.Token
	if u.Cert != nil {
		auth.ClientCertificateData, auth.ClientKeyData = u.Cert.CertPEM, u.Cert.KeyPEM
	}
	c := clientcmdapi.NewContext()
	c.Cluster, c.AuthInfo = "cluster", u.Name
	cfg.Clusters["cluster"], cfg.AuthInfos[u.Name], cfg.Contexts["default"] = cluster, auth, c
	cfg.CurrentContext = "default"
	return clientcmd.WriteToFile(*cfg, path)
}

// StartClientCertificateSigner starts a kube-controller-manager whose CSR signing
// controller issues kubernetes.io/kube-apiserver-client certificates from the client CA,
// with the CA's key written beside its certificate, as kubeadm's does: a
// CertificateSigningRequest an admin approves is then signed as in a real cluster.
func (cp *ControlPlane) StartClientCertificateSigner(ctx context.Context) (*ControllerManager, error) {
	ca := cp.PKI.ClientCA
	der, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	keyFile := filepath.Join(cp.PKI.Dir, "client-ca.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return cp.StartControllerManager(ctx, ControllerManagerOptions{
		Controllers: []string{"certificatesigningrequest-signing-controller"},
		Flags: []string{
			"--cluster-signing-kube-apiserver-client-cert-file=" + ca.File,
			"--cluster-signing-kube-apiserver-client-key-file=" + keyFile,
		},
	})
}
