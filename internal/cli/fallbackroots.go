package cli

import (
	"crypto/x509"
	"sync"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// useFallbackRoots gives the process Mozilla's root CAs for where the system has none: the
// OCI image is FROM scratch, and a token-exchange plugin in it verifies a public token
// endpoint. Only the commands that reach public endpoints call it: parsing the ~150
// roots costs about 5 ms, which the blank import of x509roots/fallback made every
// command pay at init, a warm `kplug exec-cache` hit included. Where the system has roots
// (or a platform verifier), crypto/x509 keeps using them, as with the blank import; the
// Once is because SetFallbackRoots panics on a second call (tests run commands in one
// process).
var useFallbackRoots = sync.OnceFunc(func() {
	pool := x509.NewCertPool()
	for root := range bundle.Roots() {
		cert, err := x509.ParseCertificate(root.Certificate)
		if err != nil {
			// The bundle is generated and tested upstream; a root that does not parse
			// is left out rather than failing a command that may not need it.
			continue
		}
		if root.Constraint != nil {
			pool.AddCertWithConstraint(cert, root.Constraint)
		} else {
			pool.AddCert(cert)
		}
	}
	x509.SetFallbackRoots(pool)
})
