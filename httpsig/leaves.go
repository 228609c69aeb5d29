package httpsig

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/kplug/kplug/internal/certmemo"
)

// DefaultLeafCacheSize is the leaves a zero LeafCache keeps.
const DefaultLeafCacheSize = certmemo.DefaultSize

// LeafCache remembers the leaf certificates Verify parsed from CertificateHeader, by the
// field's exact bytes, so that a client sending the same certificate with each request
// has it parsed once (parsing showed as a tenth of a verifier's work). Identical bytes
// parse to the same certificate, so a hit changes no outcome: the keyid is still compared
// with the digest of those bytes on every request, and whether the certificate is trusted
// stays resolve's to decide each time. Only a certificate a request was accepted with is
// remembered (its digest matched the keyid, resolve trusted it and the signature verified
// with its key), so that clients who are not trusted cannot fill the cache; until its
// NotAfter, and at most Size of them (DefaultLeafCacheSize if zero), the least recently
// used going first.
//
// The zero value is ready to use; a LeafCache must not be copied once used. It is safe for
// concurrent use.
type LeafCache struct {
	memo certmemo.Memo[string, cachedLeaf]
}

// NewLeafCache returns a LeafCache that keeps at most size leaves; size <= 0 means
// DefaultLeafCacheSize.
func NewLeafCache(size int) *LeafCache {
	c := &LeafCache{}
	c.memo.Size = size
	return c
}

// Len is the number of leaves remembered, expired ones included until looked up or
// pushed out.
func (c *LeafCache) Len() int { return c.memo.Len() }

// cachedLeaf is a parsed leaf and the keyid its DER's digest makes.
type cachedLeaf struct {
	keyID string
	cert  *x509.Certificate
}

// certificate returns the leaf in CertificateHeader if its digest is the one keyid names
// (KEP-6308 "Identity from a certificate": recomputed from the bytes received, or from
// identical bytes seen before). leaves may be nil. remember, when not nil, puts a newly
// parsed leaf in leaves: the caller calls it once the request is accepted, never before
// (issue 33 review 2, C1).
func certificate(h http.Header, keyid string, leaves *LeafCache, now time.Time) (cert *x509.Certificate, remember func(), err error) {
	lines := h.Values(CertificateHeader)
	switch {
	case len(lines) == 0:
		return nil, nil, fmt.Errorf("keyid %s names a certificate but the request has no %s", Quote(keyid), CertificateHeader)
	case len(lines) > 1 || len(lines[0]) > maxCertificateBytes:
		return nil, nil, fmt.Errorf("%s must be one field line of at most %d bytes", CertificateHeader, maxCertificateBytes)
	}
	if leaves != nil {
		if l, ok := leaves.memo.Get(lines[0], now); ok {
			if l.keyID != keyid {
				return nil, nil, certificateMismatch(keyid)
			}
			return l.cert, nil, nil
		}
	}
	item, err := httpsfv.UnmarshalItem(lines)
	der, isBytes := item.Value.([]byte)
	if err != nil || !isBytes {
		return nil, nil, fmt.Errorf("%s is not a structured field byte sequence", CertificateHeader)
	}
	derKeyID := CertificateKeyID(der)
	if derKeyID != keyid {
		return nil, nil, certificateMismatch(keyid)
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", CertificateHeader, err)
	}
	if leaves != nil && now.Before(cert.NotAfter) {
		line := lines[0]
		remember = func() {
			// A copy of the line: the key must not hold whatever buffer the request's
			// header was cut from.
			leaves.memo.Put(strings.Clone(line), cachedLeaf{keyID: derKeyID, cert: cert}, cert.NotAfter)
		}
	}
	return cert, remember, nil
}

func certificateMismatch(keyid string) error {
	return fmt.Errorf("keyid %s is not the SHA-256 of the certificate in %s", Quote(keyid), CertificateHeader)
}
