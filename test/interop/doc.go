// Package interop checks kplug's protocol implementations against implementations
// nobody here wrote: httpsig against the npm package http-message-signatures (pinned in
// rfc9421/package-lock.json, installed by `make tools`), run with node, in both of KEP-6308's
// keyid forms, with hmac-sha256 both ways (a shared secret, and a key on the SigV4 ladder
// that node folds with its own HMAC), and httpsig/verifier's handler accepting node's
// certificate-form signatures.
package interop
