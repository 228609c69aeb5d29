package framework

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// User is an identity the control plane authenticates, with a kubeconfig that has one
// context per apiserver (named after it); the first server's context is current.
type User struct {
	Name       string
	UID        string // set for token users
	Groups     []string
	Token      string   // static token users
	Cert       *KeyPair // client-certificate users
	Kubeconfig string
}

func (cp *ControlPlane) createUsers() error {
	p := cp.PKI
	admin, err := p.ClientCA.IssueClient("admin", "kplug-admin", "system:masters")
	if err != nil {
		return err
	}
	alice, err := p.ClientCA.IssueClient("alice", "alice", "developers")
	if err != nil {
		return err
	}
	token, err := randomToken()
	if err != nil {
		return err
	}
	cp.Admin = &User{Name: "kplug-admin", Groups: []string{"system:masters"}, Cert: admin}
	cp.CertUser = &User{Name: "alice", Groups: []string{"developers"}, Cert: alice}
	cp.TokenUser = &User{Name: "bob", UID: "bob-uid", Groups: []string{"developers", "testers"}, Token: token}

	// The static token file is CSV: token,user,uid,"group1,group2".
	u := cp.TokenUser
	line := fmt.Sprintf("%s,%s,%s,%q\n", u.Token, u.Name, u.UID, strings.Join(u.Groups, ","))
	cp.tokenFile = filepath.Join(cp.PKI.Dir, "tokens.csv")
	return os.WriteFile(cp.tokenFile, []byte(line), 0o600)
}

func (cp *ControlPlane) writeKubeconfigs() error {
	for _, u := range []*User{cp.Admin, cp.CertUser, cp.TokenUser} {
		cfg := clientcmdapi.NewConfig()
		auth := clientcmdapi.NewAuthInfo()
		auth.Token = u.Token
		if u.Cert != nil {
			auth.ClientCertificateData = u.Cert.CertPEM
			auth.ClientKeyData = u.Cert.KeyPEM
		}
		cfg.AuthInfos[u.Name] = auth
		for _, s := range cp.Servers {
			cluster := clientcmdapi.NewCluster()
			cluster.Server = s.URL
			cluster.CertificateAuthorityData = cp.PKI.ClusterCA.CertPEM
			cfg.Clusters[s.Name] = cluster
			ctx := clientcmdapi.NewContext()
			ctx.Cluster, ctx.AuthInfo = s.Name, u.Name
			cfg.Contexts[s.Name] = ctx
		}
		cfg.CurrentContext = cp.Servers[0].Name
		u.Kubeconfig = filepath.Join(cp.Dir, u.Name+".kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, u.Kubeconfig); err != nil {
			return fmt.Errorf("writing %s: %w", u.Kubeconfig, err)
		}
	}
	return nil
}

// RESTConfig returns a client configuration for user against the server with index i.
func (cp *ControlPlane) RESTConfig(u *User, i int) *rest.Config {
	cfg := &rest.Config{
		Host:            cp.Servers[i].URL,
		BearerToken:     u.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.PKI.ClusterCA.CertPEM},
		QPS:             -1, // no client-side throttling in tests
	}
	if u.Cert != nil {
		cfg.CertData, cfg.KeyData = u.Cert.CertPEM, u.Cert.KeyPEM
	}
	return cfg
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// WriteExecKubeconfig writes a kubeconfig for the first apiserver in which each user runs
// an exec plugin; each user gets a context of the same name, and the first name in sorted
// order is the current context.
func (cp *ControlPlane) WriteExecKubeconfig(path string, users map[string]*clientcmdapi.ExecConfig) error {
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = cp.Servers[0].URL
	cluster.CertificateAuthorityData = cp.PKI.ClusterCA.CertPEM
	cfg.Clusters[cp.Servers[0].Name] = cluster
	for _, name := range slices.Sorted(maps.Keys(users)) {
		auth := clientcmdapi.NewAuthInfo()
		auth.Exec = users[name]
		cfg.AuthInfos[name] = auth
		ctx := clientcmdapi.NewContext()
		ctx.Cluster, ctx.AuthInfo = cp.Servers[0].Name, name
		cfg.Contexts[name] = ctx
		if cfg.CurrentContext == "" {
			cfg.CurrentContext = name
		}
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// ClientTLS returns a TLS configuration that trusts the cluster CA and, for a
// client-certificate user, presents u's certificate (token users add their token to
// each request themselves).
func (cp *ControlPlane) ClientTLS(u *User) (*tls.Config, error) {
	c := &tls.Config{RootCAs: cp.PKI.ClusterCA.Pool(), MinVersion: tls.VersionTLS12}
	if u.Cert != nil {
		cert, err := tls.X509KeyPair(u.Cert.CertPEM, u.Cert.KeyPEM)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
