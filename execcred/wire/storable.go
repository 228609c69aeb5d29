package wire

import "strings"

// Uncached says why a call must bypass a credential cache, or "" when a cache may answer
// it: a client that asks for signing material (spec.httpSignature) is answered by the
// plugin itself, since its answer is never stored and an answer stored for a client that
// did not ask is not the answer to this one. `kplug exec-cache` and the plugin SDK's Cache
// both follow it.
func (i *Info) Uncached() string {
	if i.HTTPSignature != nil {
		return "the client asks for signing material (spec.httpSignature), which is never cached"
	}
	return ""
}

// Unstorable says why an answer must never be written to a cache, or "" when it may be.
// Signing material (KEP-6308: a private key or a shared secret) is never written down; an
// exec proxy answer points to a running process, which does not outlive it; and what a
// plugin put in status fields this package does not know (a newer protocol's, perhaps
// keys) cannot be told harmless. `kplug exec-cache` and the plugin SDK's Cache both follow
// it, so that key material a plugin returns reaches no disk and no keyring.
func (s *Status) Unstorable() string {
	switch {
	case s.HTTPSignature != nil:
		return "it carries signing material (status.httpSignature): keys are never written down"
	case s.ProxyConfig != nil:
		return "it is an exec proxy answer: it points to a running proxy"
	case len(s.Unknown) > 0:
		return "it has status fields this cache does not know, which may hold keys: " + strings.Join(s.Unknown, ", ")
	}
	return ""
}
