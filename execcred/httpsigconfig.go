package execcred

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/httpsig"
)

// HTTPSignatureAPIVersion is the only apiVersion of a kubeconfig httpSignature block.
const HTTPSignatureAPIVersion = "client.authentication.k8s.io/v1alpha1"

// HTTPSignature is a kubeconfig user's httpSignature block (KEP-6308 "Client
// configuration"): the user signs each request instead of sending a credential. The key
// comes from files (CertFile and KeyFile, or CredentialBundleFile) or, with none of those,
// from the user's exec plugin. clientcmd does not know the block yet and drops it, so
// LoadHTTPSignature reads it from the kubeconfig files themselves.
type HTTPSignature struct {
	APIVersion string `json:"apiVersion"`
	// TTL is accepted as the KEP writes it. kplug's signatures carry no expires
	// parameter (the profile's parameters are created, nonce, alg, tag and keyid), so the
	// verifier's maxAge alone bounds a signature's life.
	TTL string `json:"ttl,omitempty"`
	// CertFile and KeyFile are a PEM certificate and its PEM private key; KeyFile may be
	// another key URI when Options.OpenKey reads it (kplug's CLI: pkcs11:).
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// CredentialBundleFile is one PEM file holding the certificate and its key, read at
	// once so that a rotation is never seen half done (what a PodCertificateProjection
	// writes).
	CredentialBundleFile string `json:"credentialBundleFile,omitempty"`
	// SignedHeaders are the headers every signature covers. For key files each has a
	// value (Value is a kplug extension); for an exec plugin's key the plugin returns the
	// values and Value must be empty. X-K8s-Audience is always covered.
	SignedHeaders []SignedHeader `json:"signedHeaders,omitempty"`
	// KeyDerivation is the KEP's HMAC key derivation ladder (a wire.KeyDerivation): the
	// exec plugin returns a secret on it, and each request's key is derived from that
	// secret for the signature's created time.
	KeyDerivation json.RawMessage `json:"keyDerivation,omitempty"`
}

// SignedHeader names a covered header and, for key files, its value.
type SignedHeader struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// LoadHTTPSignature returns the httpSignature block of the kubeconfig user named user, or
// nil when it has none. files are the kubeconfig files in clientcmd's precedence
// (clientcmd.ClientConfigLoadingRules.GetLoadingPrecedence); as clientcmd merges them, the
// first file that defines the user is the one that counts, and files that do not exist
// are skipped. Relative file names are resolved against the directory of the kubeconfig
// that names them, as clientcmd does for client-certificate. The block is decoded
// strictly, and validated (Validate).
func LoadHTTPSignature(files []string, user string) (*HTTPSignature, error) {
	for _, file := range files {
		if file == "" {
			continue
		}
		b, err := os.ReadFile(file) //nolint:gosec // the kubeconfig files clientcmd has just read
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading kubeconfig: %w", err)
		}
		h, found, err := httpSignatureIn(b, user)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: user %q: %w", file, user, err)
		}
		if !found {
			continue
		}
		if h == nil {
			return nil, nil
		}
		h.resolve(filepath.Dir(file))
		if err := h.Validate(); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: user %q: %w", file, user, err)
		}
		return h, nil
	}
	return nil, nil
}

// httpSignatureIn decodes the block of user in one kubeconfig file; found says whether
// the file defines the user at all.
func httpSignatureIn(kubeconfig []byte, user string) (h *HTTPSignature, found bool, err error) {
	var kc struct {
		Users []struct {
			Name string `json:"name"`
			User struct {
				HTTPSignature json.RawMessage `json:"httpSignature"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(kubeconfig, &kc); err != nil {
		return nil, false, fmt.Errorf("decoding: %w", err)
	}
	for _, u := range kc.Users {
		if u.Name != user {
			continue
		}
		if len(u.User.HTTPSignature) == 0 || string(u.User.HTTPSignature) == "null" {
			return nil, true, nil
		}
		// Strict and case-sensitive, as Kubernetes decodes its configuration: a misspelt
		// field is an error, not a key silently left out.
		h = &HTTPSignature{}
		strict, err := kjson.UnmarshalStrict(u.User.HTTPSignature, h, kjson.DisallowUnknownFields)
		if err == nil && len(strict) > 0 {
			err = errors.Join(strict...)
		}
		if err != nil {
			return nil, true, fmt.Errorf("httpSignature: %w", err)
		}
		return h, true, nil
	}
	return nil, false, nil
}

// resolve makes the block's relative file names absolute against dir.
func (h *HTTPSignature) resolve(dir string) {
	for _, f := range []*string{&h.CertFile, &h.KeyFile, &h.CredentialBundleFile} {
		if *f != "" && !filepath.IsAbs(*f) && !isKeyURI(*f) {
			*f = filepath.Join(dir, *f)
		}
	}
}

// isKeyURI reports whether a keyFile is a URI other than a file name (pkcs11:...): a
// scheme of two letters or more, so that C:\k.pem stays a path.
func isKeyURI(s string) bool {
	scheme, _, ok := strings.Cut(s, ":")
	return ok && len(scheme) > 1 && !strings.ContainsAny(scheme, `/\.`) && !strings.EqualFold(scheme, "file")
}

// HasKeyFiles reports whether the block names its key files, rather than leaving the key
// to the exec plugin.
func (h *HTTPSignature) HasKeyFiles() bool {
	return h.CertFile != "" || h.KeyFile != "" || h.CredentialBundleFile != ""
}

// Validate checks the block: its apiVersion, ttl, key files, key derivation ladder and
// signed headers.
func (h *HTTPSignature) Validate() error {
	switch {
	case h.APIVersion != HTTPSignatureAPIVersion:
		return fmt.Errorf("httpSignature: apiVersion %q: want %s", h.APIVersion, HTTPSignatureAPIVersion)
	case h.hasKeyDerivation() && h.HasKeyFiles():
		return errors.New("httpSignature.keyDerivation derives a shared secret that an exec plugin returns: it does not go with certFile, keyFile or credentialBundleFile")
	case h.CredentialBundleFile != "" && (h.CertFile != "" || h.KeyFile != ""):
		return errors.New("httpSignature: credentialBundleFile and certFile/keyFile are two forms of the same thing: set one")
	case (h.CertFile == "") != (h.KeyFile == ""):
		return errors.New("httpSignature: certFile and keyFile go together: the certificate is the key's identity (a key without a certificate comes from an exec plugin, with its keyID)")
	}
	if _, err := h.keyDerivation(); err != nil {
		return err
	}
	if h.TTL != "" {
		if d, err := time.ParseDuration(h.TTL); err != nil || d <= 0 {
			return fmt.Errorf("httpSignature.ttl %q: want a positive duration such as 30s", h.TTL)
		}
	}
	seen := map[string]bool{}
	for _, sh := range h.SignedHeaders {
		name := strings.ToLower(sh.Name)
		switch {
		case sh.Name == "":
			return errors.New("httpSignature.signedHeaders: a header without a name")
		case seen[name]:
			return fmt.Errorf("httpSignature.signedHeaders: %s is listed twice", sh.Name)
		case httpsig.IsReservedHeader(sh.Name):
			return fmt.Errorf("httpSignature.signedHeaders: %s is reserved and cannot be a configured signed header (KEP-6308 \"Required signed headers\")", sh.Name)
		case h.HasKeyFiles() && sh.Value == "":
			return fmt.Errorf("httpSignature.signedHeaders: %s needs a value: with key files, the kubeconfig gives every signed header's value", sh.Name)
		case !h.HasKeyFiles() && sh.Value != "":
			return fmt.Errorf("httpSignature.signedHeaders: %s has a value, but the key comes from the exec plugin, which returns the values (status.httpSignature.signedHeaders): list the name alone", sh.Name)
		}
		seen[name] = true
	}
	if h.HasKeyFiles() && !seen[strings.ToLower(httpsig.AudienceHeader)] {
		return fmt.Errorf("httpSignature: no value for %s, which every signature carries against cross-cluster replay: %s", httpsig.AudienceHeader, fileAudienceHint)
	}
	return nil
}

// headers returns the configured values of the signed headers (key files).
func (h *HTTPSignature) headers() map[string]string {
	m := make(map[string]string, len(h.SignedHeaders))
	for _, sh := range h.SignedHeaders {
		m[sh.Name] = sh.Value
	}
	return m
}

func (h *HTTPSignature) hasKeyDerivation() bool {
	return len(h.KeyDerivation) > 0 && string(h.KeyDerivation) != "null"
}

// keyDerivation parses and checks the ladder, if any (unknown fields refused: a ladder
// misread derives a key no one can explain).
func (h *HTTPSignature) keyDerivation() (*wire.KeyDerivation, error) {
	if !h.hasKeyDerivation() {
		return nil, nil
	}
	var kd wire.KeyDerivation
	dec := json.NewDecoder(bytes.NewReader(h.KeyDerivation))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kd); err != nil {
		return nil, fmt.Errorf("httpSignature.keyDerivation: %w", err)
	}
	l := ladderOf(&kd)
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("httpSignature.%w", err)
	}
	return &kd, nil
}

// ladderOf is the signing library's form of a ladder, field by field (a field added to
// one and not copied here would be dropped without an error; TestLadderOfCopiesEveryField
// guards it).
func ladderOf(kd *wire.KeyDerivation) httpsig.Ladder {
	l := httpsig.Ladder{Kind: kd.Kind, Hash: kd.Hash, SecretPrefix: kd.SecretPrefix}
	for _, s := range kd.Steps {
		l.Steps = append(l.Steps, httpsig.LadderStep{Name: s.Name, Date: s.Date, Scope: s.Scope, Literal: s.Literal})
	}
	return l
}

// request is spec.httpSignature for the exec plugin: every configured header, and
// X-K8s-Audience, which every signature carries, even when the kubeconfig omits it; and
// the key derivation ladder, if any (Validate has checked it).
func (h *HTTPSignature) request() *wire.HTTPSignatureRequest {
	r := &wire.HTTPSignatureRequest{}
	r.KeyDerivation, _ = h.keyDerivation()
	audience := false
	for _, sh := range h.SignedHeaders {
		r.SignedHeaders = append(r.SignedHeaders, wire.HTTPSignatureHeader{Name: sh.Name})
		audience = audience || strings.EqualFold(sh.Name, httpsig.AudienceHeader)
	}
	if !audience {
		r.SignedHeaders = append(r.SignedHeaders, wire.HTTPSignatureHeader{Name: httpsig.AudienceHeader})
	}
	return r
}
