package sidecar

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// CertificateFiles serves a certificate and key from PEM files and reads them again when
// either file changes, so that rotated certificates are used without a restart. It is safe
// for concurrent use; create it with LoadCertificateFiles.
type CertificateFiles struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // modification times and sizes of both files
	checked time.Time
}

// LoadCertificateFiles reads the pair once, failing if it cannot.
func LoadCertificateFiles(certFile, keyFile string) (*CertificateFiles, error) {
	c := &CertificateFiles{certFile: certFile, keyFile: keyFile}
	if _, err := c.Get(); err != nil {
		return nil, err
	}
	return c, nil
}

// Get returns the current certificate. It checks the files at most once a second; when
// they changed but no longer form a valid pair (half written), it keeps the previous one.
func (c *CertificateFiles) Get() (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert != nil && time.Since(c.checked) < time.Second {
		return c.cert, nil
	}
	c.checked = time.Now()
	stamp, err := fileStamp(c.certFile, c.keyFile)
	if err == nil && stamp == c.stamp && c.cert != nil {
		return c.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		if c.cert != nil {
			return c.cert, nil
		}
		return nil, fmt.Errorf("loading certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert, c.stamp = &cert, stamp
	return c.cert, nil
}

// GetCertificate suits tls.Config.GetCertificate.
func (c *CertificateFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.Get()
}

// GetClientCertificate suits tls.Config.GetClientCertificate.
func (c *CertificateFiles) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return c.Get()
}

func fileStamp(files ...string) (string, error) {
	s := ""
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	return s, nil
}
