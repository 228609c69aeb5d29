// Package modify holds what an exec proxy plugin does to the requests it forwards (see
// execproxy/server.Options): it signs them (AWS Signature Version 4, RFC 9421 HTTP Message
// Signatures) and authenticates the TLS connection with a client certificate whose key
// may live outside the process (a PEM file, or a PKCS#11 token that never lets it out).
//
// A signer is a func(*http.Request) error for Options.ModifyRequest; a ClientCertificate
// supplies Options.GetClientCertificate and Options.ClientSessionCache, and picks up a
// rotated certificate for new connections without disturbing open ones.
package modify
