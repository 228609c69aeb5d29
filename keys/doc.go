// Package keys opens the private keys and client certificates that kplug's mechanisms
// authenticate with, wherever the key lives: a PEM file, or a PKCS#11 token or TPM 2.0 that
// never lets it out. It sits below every user of key material (the exec proxy's client certificate,
// KEP-6308 request signing in package httpsig and the kubeconfig httpSignature block) so
// that each accepts the same key references.
//
//   - Open turns a key reference (a file path, file:PATH, a pkcs11: or a tpm: URI) into a
//     Source, which finds the private key belonging to a certificate's public key;
//   - NewClientCertificate pairs a Source with a certificate that may be rotated on disk
//     or on the token: its GetClientCertificate and ClientSessionCache go into a TLS
//     client configuration (execproxy/server.Options has fields for both), and Watch
//     tells when connections made with the old certificate should be retired;
//   - OpenSigner opens a key reference that names exactly one key as a crypto.Signer,
//     for signing requests (httpsig.Key.Signer).
//
// Keys and certificates are checked when they are opened, so that a program fails at start
// with a message naming the bad input, not at its first request with a TLS error. A key
// on a token signs there; PKCS#11 needs a build with cgo, and a build without it says so.
//
// TPM 2.0 keys need no cgo, so that the release binaries can use them (on Linux through
// /dev/tpmrm0; Windows TBS is compiled but untested). They are named the two ways users
// already hold them: a TSS2 PRIVATE KEY file, which tpm2-openssl, tpm2-tss-engine and
// tpm2_encodeobject write and which is useless off the TPM that made it, or the persistent
// handle tpm2_evictcontrol gave the key. A TPM key is loaded when it is opened and checked
// by signing once, so that a wrong auth value fails at start.
package keys
