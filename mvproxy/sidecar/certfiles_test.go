package sidecar

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testpki"
)

// writePair writes a certificate for cn and its key as dir/tls.crt and dir/tls.key.
func writePair(t *testing.T, dir string, ca *testpki.CA, cn string) {
	t.Helper()
	kp, err := ca.IssueClient(cn, cn)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), kp.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), kp.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCertificateFilesReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewTestCA(t, "ca")
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
