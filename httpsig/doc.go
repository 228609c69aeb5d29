// Package httpsig signs and verifies Kubernetes API requests with RFC 9421 HTTP message
// signatures in the profile of KEP-6308 "HTTP Message Signature Authentication"
// (kubernetes/enhancements PR #6335; the text this package follows is named by
// KEPRevision). Each rule cites the KEP section it comes from, so a change to the KEP
// maps to one place here.
//
// The pieces:
//
//   - The profile (profile.go): what every signature covers (Floor, IsProtectedHeader,
//     AudienceHeader), what configuration may not require (IsReservedHeader), and the
//     certificate key's keyid (CertificateKeyID, CertificateHeader).
//   - Signer is the client's half: NewSigner checks a Key (a crypto.Signer, with its
//     certificate or a KeyID) and the signed headers once; Sign signs one request, adding
//     Content-Digest for a body; RoundTripper signs every request a client sends.
//   - Verify is the server's half: it checks a request against a Policy (required headers,
//     age, clock skew) and a resolve function that turns the signature's keyid into a public
//     key or an HMAC secret, and returns the verified Signature. A refusal is an *Error
//     whose Outcome suits a metric label. VerifyRequest is the same for a verifier of many
//     requests: it remembers parsed certificates in a LeafCache, and returns what every
//     member of Signature-Input covers from the one parse it made.
//
// The package is the one implementation of the profile in kplug: the exec proxy's
// `--sign rfc9421`, in-process signing in execcred, and the verifying front proxy in
// httpsig/verifier all use it. It depends on the standard library and an RFC 8941/9651
// structured field parser only.
package httpsig
