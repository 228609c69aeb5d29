package mvproxy

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writePair(t *testing.T, dir string, ca *testCA, cn string) {
	t.Helper()
	cert := ca.client(t, cn)
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCertificateFilesReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, "ca")
	writePair(t, dir, ca, "first")
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	files, err := LoadCertificateFiles(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		c, err := files.Get()
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
	if got := cn(); got != "first" {
		t.Fatalf("loaded %q", got)
	}
	writePair(t, dir, ca, "second")
	later := time.Now().Add(time.Minute)
	for _, f := range []string{certFile, keyFile} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	files.mu.Lock()
	files.checked = time.Time{} // as if a second had passed
	files.mu.Unlock()
	if got := cn(); got != "second" {
		t.Errorf("after rotation: %q, want second", got)
	}
	// A half-written pair keeps the last good certificate.
	if err := os.WriteFile(keyFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	files.mu.Lock()
	files.checked = time.Time{}
	files.mu.Unlock()
	if got := cn(); got != "second" {
		t.Errorf("with a broken key file: %q, want the previous certificate", got)
	}
	if _, err := LoadCertificateFiles(certFile, filepath.Join(dir, "missing.key")); err == nil {
		t.Error("LoadCertificateFiles with a missing key: no error")
	}
}
