package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPeerproxyInvalidConfigurationExitsTwo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"nothing given", []string{"peerproxy"},
			"Error: --kubeconfig is required\n--tls-cert-file is required\n--tls-private-key-file is required\n--requestheader-client-ca-file is required\n--proxy-client-cert-file is required\n--proxy-client-key-file is required\n--peer-ca-file is required\n"},
		{"unreadable files", []string{"peerproxy", "--kubeconfig=" + filepath.Join(dir, "kc"), "--tls-cert-file=" + filepath.Join(dir, "missing.crt"),
			"--tls-private-key-file=k", "--requestheader-client-ca-file=" + notPEM, "--proxy-client-cert-file=p", "--proxy-client-key-file=p",
			"--peer-ca-file=" + notPEM, "--listen-address=:6444"}, ""},
		{"one CA for users and peers, no allowed names", []string{"peerproxy", "--kubeconfig=kc", "--tls-cert-file=c", "--tls-private-key-file=k",
			"--client-ca-file=" + notPEM, "--requestheader-client-ca-file=" + notPEM, "--proxy-client-cert-file=p", "--proxy-client-key-file=p",
			"--peer-ca-file=" + notPEM}, ""},
		{"arguments", []string{"peerproxy", "extra"}, "Error: unknown command \"extra\" for \"kplug peerproxy\"\nRun 'kplug peerproxy --help' for usage.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, tt.args...)
			if code != ExitUsage || out != "" {
				t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
			}
			if tt.wantStderr != "" && errOut != tt.wantStderr {
				t.Errorf("stderr\n%q\nwant\n%q", errOut, tt.wantStderr)
			}
			if tt.name == "one CA for users and peers, no allowed names" && !strings.Contains(errOut, "every user's client certificate would be trusted to assert any identity") {
				t.Errorf("stderr lacks the shared-CA error:\n%s", errOut)
			}
			if tt.name == "unreadable files" {
				for _, want := range []string{
					"--tls-cert-file/--tls-private-key-file: loading certificate " + filepath.Join(dir, "missing.crt") + " and key k: open " + filepath.Join(dir, "missing.crt") + ": no such file or directory",
					"--peer-ca-file " + notPEM + ": no PEM certificate in it",
					"--requestheader-client-ca-file " + notPEM + ": no PEM certificate in it",
					`--advertise-address is required when --listen-address ":6444" names no host`,
				} {
					if !strings.Contains(errOut, want) {
						t.Errorf("stderr lacks %q:\n%s", want, errOut)
					}
				}
			}
		})
	}
}

// writeCert writes a self-signed CA and a serving certificate it signs for names into dir,
// returning the CA file and the certificate and key files.
func writeCert(t *testing.T, dir, prefix string, names ...string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: prefix + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: prefix},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: names,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	caFile, certFile, keyFile = filepath.Join(dir, prefix+"-ca.crt"), filepath.Join(dir, prefix+".crt"), filepath.Join(dir, prefix+".key")
	for f, b := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}

// The certificate a sidecar presents to peers must verify with the peer CA for the peer
// server name, or peers would refuse it: peerproxy says so at start.
func TestPeerproxyRefusesCertificatePeersWouldRefuse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clusterCA, serving, servingKey := writeCert(t, dir, "serving", "apiserver.example")
	peerCA, peer, peerKey := writeCert(t, dir, "peer", "kubernetes.default.svc")
	common := []string{"peerproxy", "--kubeconfig=" + filepath.Join(dir, "missing"), "--tls-cert-file=" + serving, "--tls-private-key-file=" + servingKey,
		"--requestheader-client-ca-file=" + clusterCA, "--proxy-client-cert-file=" + serving, "--proxy-client-key-file=" + servingKey, "--advertise-address=10.0.0.1:6444"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"serving certificate without the peer server name", []string{"--peer-ca-file=" + clusterCA},
			`--tls-cert-file: peers would refuse this sidecar: the certificate does not verify with --peer-ca-file for --peer-server-name "kubernetes.default.svc" (x509: certificate is valid for apiserver.example, not kubernetes.default.svc); issue one from the peer CA for that name`},
		{"peer certificate from another CA", []string{"--peer-ca-file=" + clusterCA, "--peer-tls-cert-file=" + peer, "--peer-tls-private-key-file=" + peerKey},
			`--peer-tls-cert-file: peers would refuse this sidecar: the certificate does not verify with --peer-ca-file for --peer-server-name "kubernetes.default.svc" (x509: certificate signed by unknown authority`},
		{"peer certificate without its key", []string{"--peer-ca-file=" + peerCA, "--peer-tls-cert-file=" + peer},
			"--peer-tls-cert-file and --peer-tls-private-key-file go together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := run(t, append(slices.Clone(common), tt.args...)...)
			if code != ExitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("code %d, stderr lacks %q:\n%s", code, tt.want, errOut)
			}
		})
	}
	// The dedicated peer CA's certificate is accepted: only the missing kubeconfig is left.
	code, _, errOut := run(t, append(slices.Clone(common), "--peer-ca-file="+peerCA, "--peer-tls-cert-file="+peer, "--peer-tls-private-key-file="+peerKey)...)
	if code != ExitUsage || strings.Contains(errOut, "peers would refuse") || !strings.Contains(errOut, "--kubeconfig") {
		t.Errorf("code %d, stderr:\n%s", code, errOut)
	}
}
