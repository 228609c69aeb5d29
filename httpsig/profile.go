package httpsig

import (
	"strings"
)

// KEPRevision names the KEP text this package implements, and the prototype whose resolver
// protocol and derivation ladder it follows where the text leaves them open.
const KEPRevision = "KEP-6308 README at kubernetes/enhancements a720c944 (draft of 2026-09-08, PR #6335); resolver protocol and ladder as in micahhausler/kubernetes 7b005b862a97"

const (
	// Tag is the tag parameter every signature carries and every verifier requires
	// (KEP-6308 "Signature-Input and Signature").
	Tag = "kubernetes"
	// DefaultLabel is the dictionary key client-go emits; the label carries no meaning
	// and a verifier accepts any (KEP-6308 "Signature-Input and Signature").
	DefaultLabel = "sig1"
	// AudienceHeader names the cluster a signature was made for, against cross-cluster
	// replay (KEP-6308 "Required signed headers"). Signers refuse to start without it and
	// verifiers require it covered, with a value from their configured list.
	AudienceHeader = "X-K8s-Audience"
	// CertificateHeader carries the DER leaf certificate a signature was made under, as
	// a structured field byte sequence (KEP-6308 "Signature-Certificate").
	CertificateHeader = "Signature-Certificate"
	// CertificateKeyIDPrefix starts the keyid of a certificate key: the prefix, then the
	// lowercase hex SHA-256 of the leaf's DER (KEP-6308 "keyid, and how a request selects
	// an authenticator").
	CertificateKeyIDPrefix = "x509-sha256:"
	// MaxBodyBytes bounds a body the signer digests and the verifier reads: kube-apiserver's
	// default request body limit, so nothing refused here would have been accepted there.
	MaxBodyBytes = 3 << 20
)

// Floor is the derived components every signature covers, in this order (KEP-6308
// "What a signature covers").
var Floor = []string{"@method", "@authority", "@path", "@query"}

// protectedHeaders are covered whenever present (KEP-6308 "What a signature covers",
// protected headers); impersonate-extra-* is matched by prefix.
var protectedHeaders = []string{
	"impersonate-user", "impersonate-uid", "impersonate-group",
	"audit-id", "accept", "content-type", "user-agent", "signature-certificate",
}

// IsProtectedHeader reports whether a signature must cover the header name whenever a
// request carries it (KEP-6308 "What a signature covers"): Impersonate-User,
// Impersonate-Uid, Impersonate-Group, Impersonate-Extra-*, Audit-Id, Accept,
// Content-Type, User-Agent and Signature-Certificate. Content-Digest is covered by the
// body rule instead.
func IsProtectedHeader(name string) bool {
	l := strings.ToLower(name)
	if strings.HasPrefix(l, "impersonate-extra-") {
		return true
	}
	for _, h := range protectedHeaders {
		if l == h {
			return true
		}
	}
	return false
}

// IsReservedHeader reports whether configuration may not name the header as a required
// signed header (KEP-6308 "Required signed headers", "What a signature covers"):
// Authorization, the impersonation headers, and the signature fields themselves.
func IsReservedHeader(name string) bool {
	l := strings.ToLower(name)
	switch l {
	case "authorization", "signature", "signature-input", "signature-certificate", "content-digest":
		return true
	}
	return strings.HasPrefix(l, "impersonate-")
}
