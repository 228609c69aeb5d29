// Package sigv4 signs the requests an exec proxy plugin forwards with AWS Signature
// Version 4, for API servers behind an authenticator that verifies it (e.g. a gateway in
// front of EKS). New returns a func(*http.Request) error for execproxy/server.Options'
// ModifyRequest; the proxy calls it on every request, upgrades included, after any headers
// the plugin adds, so that the signature covers them.
//
// Bodies up to MaxSignedBody are hashed; streams (watches, followed logs, upgrades) and
// larger bodies are sent with an unsigned payload. Headers that carry identity
// (Authorization, Impersonate-*, X-Remote-*) are always signed when present.
package sigv4
