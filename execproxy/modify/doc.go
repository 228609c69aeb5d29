// Package modify holds what an exec proxy plugin does to the requests it forwards: it
// signs them (AWS Signature Version 4 here; KEP-6308 HTTP message signatures with package
// httpsig, whose Signer.Sign is such a modifier) and authenticates the TLS connections to
// the API server with a client certificate whose key may live outside the process (a PEM
// file, or a PKCS#11 token that never lets it out).
//
// The pieces plug into execproxy/server.Options, which a plugin's server.Func returns:
//
//   - a signer (NewSigV4, or httpsig.Signer.Sign) is a func(*http.Request) error for
//     Options.ModifyRequest; the proxy calls it on every request, upgrades included, after
//     any headers the plugin adds, so that the signature covers them;
//   - OpenKey turns a key URI (a file, or pkcs11:) into a KeySource, and
//     NewClientCertificate pairs it with a certificate: its GetClientCertificate and
//     ClientSessionCache go into the same Options fields, and Watch's channel into
//     Options.CloseIdleConnections, so that a rotated certificate is used for new
//     connections (and pooled ones retired) without disturbing open streams;
//   - OpenSigningKey opens a key URI as the crypto.Signer of an httpsig.Signer.
//
// Keys and certificates are checked when they are opened, so that a plugin fails at start
// with a message naming the bad input, not at its first request with a TLS error.
package modify
