package sidecar

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/kplug/kplug/internal/certreload"
)

// CertificateFiles returns a getter for Options' certificates that serves the certificate
// and key in certFile and keyFile, and reads them again when the certificate file's
// content changes (checked at most once a second, since the serving certificate is asked
// for at every connection), so that rotated certificates are used without a restart. A
// replacement that cannot be used yet (its key not written, say) is logged to log (nil
// discards) and the current pair kept. It fails if the pair cannot be used now.
func CertificateFiles(certFile, keyFile string, log *slog.Logger) (func() (*tls.Certificate, error), error) {
	src := certreload.Files(certFile, keyFile)
	src.MinInterval, src.Logger = time.Second, log
	c, err := certreload.New(src)
	if err != nil {
		return nil, err
	}
	return c.Get, nil
}
