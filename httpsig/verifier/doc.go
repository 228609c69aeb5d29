// Package verifier authenticates KEP-6308 signed requests for clusters whose
// kube-apiserver does not verify HTTP message signatures itself: a front proxy that
// verifies each request with httpsig, maps the signer's certificate to a user as the
// KEP's AuthenticationConfiguration says, and forwards the request to kube-apiserver
// with the requestheader identity headers and a front-proxy client certificate.
//
// The pieces, each usable alone:
//
//   - Config is the httpSignature section of an AuthenticationConfiguration file
//     (LoadConfig, ParseConfig), strictly decoded and validated, with every CEL
//     expression compiled at load. Only x509 authenticators are supported; resolver
//     authenticators are refused.
//   - Authenticator turns a signed request into a user: httpsig.Verify with the
//     configuration's Policy, then the selected authenticator's chain check, CEL rules and
//     mappings, memoized per certificate in a bounded cache. Metrics records outcomes.
//   - Handler is the front proxy: it removes every identity header a client could forge,
//     authenticates, and forwards through httputil.ReverseProxy, upgrades included.
//   - Proxy serves Handler over TLS once it has checked, with internal/requestheader,
//     that kube-apiserver reads identity from no header Handler does not remove; it
//     follows changes of the configuration file, and stops cleanly (the `kplug
//     signature-proxy` command).
package verifier
