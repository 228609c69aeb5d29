package verifier

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kplug/kplug/httpsig"
)

// The apiVersions and kind of the configuration file (KEP-6308 "Server configuration").
const (
	configKind = "AuthenticationConfiguration"
	// DefaultMaxAge and DefaultMaxClockSkew apply when the configuration leaves them out,
	// as httpsig.Policy defaults them.
	DefaultMaxAge       = time.Minute
	DefaultMaxClockSkew = 5 * time.Second
)

var configAPIVersions = []string{"apiserver.config.k8s.io/v1alpha1", "apiserver.config.k8s.io/v1beta1", "apiserver.config.k8s.io/v1"}

// Config is a validated httpSignature section: the Policy every signature must satisfy,
// and the x509 authenticators with their trust anchors indexed by subject key ID and
// their CEL expressions compiled. It is immutable and safe for concurrent use.
type Config struct {
	// Policy is the section's requiredSignedHeaders and maxClockSkew; its MaxAge is the
	// longest of the authenticators', each of which then applies its own.
	Policy         httpsig.Policy
	authenticators []*x509Authenticator
	resolvers      []*resolverAuthenticator
	names          []string                      // of all authenticators, in configuration order
	byKeyID        map[string]*x509Authenticator // anchor subject key ID -> its authenticator
	files          []readFile                    // the certificateAuthorityFiles read
}

// readFile is a file a Config was read from, and the digest of what it held.
type readFile struct {
	path string
	sum  [sha256.Size]byte
}

// FilesChanged reports whether a certificateAuthorityFile the configuration was read from
// holds something else now, or cannot be read: the configuration no longer says what
// those files say.
func (c *Config) FilesChanged() bool { return len(c.changedFiles()) > 0 }

// changedFiles are the certificateAuthorityFiles that hold something else now, or cannot
// be read.
func (c *Config) changedFiles() []string {
	var changed []string
	for _, f := range c.files {
		data, err := os.ReadFile(f.path)
		if err != nil || sha256.Sum256(data) != f.sum {
			changed = append(changed, f.path)
		}
	}
	return changed
}

// anchors lists each trust anchor as "authenticator: subject (sha256:fingerprint)", for
// logs: the fingerprint is the SHA-256 of the anchor's DER, as openssl x509 -fingerprint
// -sha256 shows it without colons.
func (c *Config) anchors() []string {
	var out []string
	for _, a := range c.authenticators {
		for _, cert := range a.anchors {
			out = append(out, fmt.Sprintf("%s: %s (sha256:%x)", a.name, cert.Subject, sha256.Sum256(cert.Raw)))
		}
	}
	sort.Strings(out)
	return out
}

// AuthenticatorNames are the configured authenticators' names, in configuration order.
func (c *Config) AuthenticatorNames() []string { return slices.Clone(c.names) }

// x509Authenticator is one configured authenticator.
type x509Authenticator struct {
	name      string
	maxAge    time.Duration
	anchors   []*x509.Certificate
	caFile    readFile // certificateAuthorityFile, if the anchors came from one
	roots     *x509.CertPool
	certRules []rule
	mapping   mapping
	userRules []rule
}

// The file's shape, as in KEP-6308 "Server configuration" and "Identity from a
// certificate". Only the httpSignature section is decoded strictly.
type (
	fileHeader struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	httpSignatureSection struct {
		RequiredSignedHeaders map[string][]string `json:"requiredSignedHeaders"`
		MaxClockSkew          *metav1.Duration    `json:"maxClockSkew,omitempty"`
		Authenticators        []authenticatorSpec `json:"authenticators"`
	}
	authenticatorSpec struct {
		Name                string           `json:"name"`
		MaxAge              *metav1.Duration `json:"maxAge,omitempty"`
		X509                *x509Spec        `json:"x509,omitempty"`
		Resolver            *resolverSpec    `json:"resolver,omitempty"`
		UserValidationRules []ruleSpec       `json:"userValidationRules,omitempty"`
	}
	x509Spec struct {
		CertificateAuthority string `json:"certificateAuthority,omitempty"`
		// CertificateAuthorityFile is a kplug extension: the anchors in a PEM file,
		// relative to the configuration file's directory.
		CertificateAuthorityFile   string        `json:"certificateAuthorityFile,omitempty"`
		CertificateValidationRules []ruleSpec    `json:"certificateValidationRules,omitempty"`
		ClaimMappings              claimMappings `json:"claimMappings"`
	}
	ruleSpec struct {
		Expression string `json:"expression"`
		Message    string `json:"message"`
	}
	claimMappings struct {
		Username expressionSpec `json:"username"`
		Groups   expressionSpec `json:"groups"`
		UID      expressionSpec `json:"uid"`
		Extra    []extraSpec    `json:"extra,omitempty"`
	}
	expressionSpec struct {
		Expression string `json:"expression"`
	}
	extraSpec struct {
		Key             string `json:"key"`
		ValueExpression string `json:"valueExpression"`
	}
)

// LoadConfig reads and validates the AuthenticationConfiguration file at path; see
// ParseConfig. log hears which other sections are ignored; nil discards.
func LoadConfig(path string, log *slog.Logger) (*Config, error) {
	data, err := os.ReadFile(path) //nolint:gosec // the operator names the file
	if err != nil {
		return nil, fmt.Errorf("verifier: reading the authentication configuration: %w", err)
	}
	c, err := ParseConfig(data, filepath.Dir(path), log)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes and validates an AuthenticationConfiguration (YAML or JSON) of
// apiVersion apiserver.config.k8s.io/v1alpha1, v1beta1 or v1. Its httpSignature section
// is decoded strictly and checked as KEP-6308 requires; other sections (jwt, anonymous)
// belong to kube-apiserver and are ignored with a log line. dir resolves a relative
// certificateAuthorityFile. Errors name the field path.
func ParseConfig(data []byte, dir string, log *slog.Logger) (*Config, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("not a YAML or JSON document: %w", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, fmt.Errorf("not an object: %w", err)
	}
	var h fileHeader
	_ = json.Unmarshal(js, &h) // the fields are checked below
	if h.Kind != configKind {
		return nil, fmt.Errorf("kind: %q, want %s", h.Kind, configKind)
	}
	if !slices.Contains(configAPIVersions, h.APIVersion) {
		return nil, fmt.Errorf("apiVersion: %q, want one of %s", h.APIVersion, strings.Join(configAPIVersions, ", "))
	}
	var ignored []string
	for k := range doc {
		if k != "apiVersion" && k != "kind" && k != "httpSignature" {
			ignored = append(ignored, k)
		}
	}
	if len(ignored) > 0 {
		sort.Strings(ignored)
		log.Info("authentication configuration: ignoring sections kube-apiserver owns", "sections", ignored)
	}
	raw, ok := doc["httpSignature"]
	if !ok || string(raw) == "null" {
		return nil, errors.New("httpSignature: required")
	}
	var s httpSignatureSection
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("httpSignature: %w", err)
	}
	c, err := s.compile(dir)
	if err != nil {
		return nil, err
	}
	if _, named := c.Policy.RequiredHeaders[http.CanonicalHeaderKey(httpsig.AudienceHeader)]; !named {
		log.Warn("authentication configuration: httpSignature.requiredSignedHeaders does not list the X-K8s-Audience values naming this cluster; every signature must still carry the header, but a request signed for another cluster that trusts the same CA is accepted here")
	}
	return c, nil
}

func (s *httpSignatureSection) compile(dir string) (*Config, error) {
	const path = "httpSignature"
	c := &Config{byKeyID: map[string]*x509Authenticator{}}
	required, err := requiredHeaders(s.RequiredSignedHeaders)
	if err != nil {
		return nil, err
	}
	c.Policy = httpsig.Policy{RequiredHeaders: required, MaxClockSkew: DefaultMaxClockSkew}
	if s.MaxClockSkew != nil {
		if s.MaxClockSkew.Duration < 0 {
			return nil, fmt.Errorf("%s.maxClockSkew: %s is negative", path, s.MaxClockSkew.Duration)
		}
		c.Policy.MaxClockSkew = s.MaxClockSkew.Duration
	}
	if len(s.Authenticators) == 0 {
		return nil, fmt.Errorf("%s.authenticators: at least one authenticator is required", path)
	}
	names := map[string]bool{}
	keys := map[string]string{} // anchor public key (DER) -> authenticator name
	for i := range s.Authenticators {
		p := fmt.Sprintf("%s.authenticators[%d]", path, i)
		a, r, err := s.Authenticators[i].compile(p, dir)
		p = fmt.Sprintf("%s (%s)", p, s.Authenticators[i].Name)
		if err != nil {
			return nil, err
		}
		name := s.Authenticators[i].Name
		if names[name] {
			return nil, fmt.Errorf("%s.name: %q is used by an earlier authenticator", p, name)
		}
		names[name] = true
		c.names = append(c.names, name)
		if r != nil {
			c.Policy.MaxAge = max(c.Policy.MaxAge, r.maxAge)
			c.resolvers = append(c.resolvers, r)
			continue
		}
		if a.caFile.path != "" {
			c.files = append(c.files, a.caFile)
		}
		for _, anchor := range a.anchors {
			if other, ok := c.byKeyID[string(anchor.SubjectKeyId)]; ok && other != a {
				return nil, fmt.Errorf("%s.x509: trust anchor %q has the subject key identifier of one of authenticator %q's; trust anchors must be disjoint", p, anchor.Subject, other.name)
			}
			if other, ok := keys[string(anchor.RawSubjectPublicKeyInfo)]; ok && other != a.name {
				return nil, fmt.Errorf("%s.x509: trust anchor %q has the public key of one of authenticator %q's; trust anchors must be disjoint", p, anchor.Subject, other)
			}
			c.byKeyID[string(anchor.SubjectKeyId)] = a
			keys[string(anchor.RawSubjectPublicKeyInfo)] = a.name
		}
		c.Policy.MaxAge = max(c.Policy.MaxAge, a.maxAge)
		c.authenticators = append(c.authenticators, a)
	}
	if err := c.checkResolvers(); err != nil {
		return nil, err
	}
	return c, nil
}

// requiredHeaders checks requiredSignedHeaders by httpsig's rules (KEP-6308 "Required
// signed headers": X-K8s-Audience, if named, with a non-empty list; no reserved name, no
// name twice) and returns it with canonical names.
func requiredHeaders(in map[string][]string) (map[string][]string, error) {
	if err := (httpsig.Policy{RequiredHeaders: in}).Validate(); err != nil {
		return nil, fmt.Errorf("httpSignature.requiredSignedHeaders: %w", err)
	}
	out := make(map[string][]string, len(in))
	for name, values := range in {
		out[http.CanonicalHeaderKey(name)] = slices.Clone(values)
	}
	return out, nil
}

// compile checks one authenticator: an x509 one, or a resolver one.
func (a *authenticatorSpec) compile(path, dir string) (*x509Authenticator, *resolverAuthenticator, error) {
	if a.Name == "" {
		return nil, nil, fmt.Errorf("%s.name: required", path)
	}
	if len(a.Name) > 253 {
		return nil, nil, fmt.Errorf("%s.name: longer than 253 characters", path)
	}
	path = fmt.Sprintf("%s (%s)", path, a.Name)
	switch {
	case a.Resolver != nil && a.X509 != nil:
		return nil, nil, fmt.Errorf("%s: exactly one of x509 and resolver may be set", path)
	case a.Resolver == nil && a.X509 == nil:
		return nil, nil, fmt.Errorf("%s: one of x509 and resolver is required", path)
	}
	maxAge := DefaultMaxAge
	if a.MaxAge != nil {
		if a.MaxAge.Duration <= 0 {
			return nil, nil, fmt.Errorf("%s.maxAge: %s is not positive", path, a.MaxAge.Duration)
		}
		maxAge = a.MaxAge.Duration
	}
	userRules, err := compileRules(path+".userValidationRules", a.UserValidationRules, userEnv)
	if err != nil {
		return nil, nil, err
	}
	if a.Resolver != nil {
		r := &resolverAuthenticator{name: a.Name, maxAge: maxAge, userRules: userRules}
		if err := a.Resolver.compile(path, r); err != nil {
			return nil, nil, err
		}
		return nil, r, nil
	}
	out, err := a.X509.compile(path, dir)
	if err != nil {
		return nil, nil, err
	}
	out.name, out.maxAge, out.userRules = a.Name, maxAge, userRules
	return out, nil, nil
}

// compile checks an x509 section.
func (x *x509Spec) compile(path, dir string) (*x509Authenticator, error) {
	out := &x509Authenticator{}
	var err error
	if out.anchors, out.caFile, err = x.anchors(path+".x509", dir); err != nil {
		return nil, err
	}
	out.roots = x509.NewCertPool()
	for _, c := range out.anchors {
		out.roots.AddCert(c)
	}
	if out.certRules, err = compileRules(fmt.Sprintf("%s.x509.certificateValidationRules", path), x.CertificateValidationRules, certEnv); err != nil {
		return nil, err
	}
	if out.mapping, err = compileMapping(path+".x509.claimMappings", x.ClaimMappings); err != nil {
		return nil, err
	}
	return out, nil
}

// anchors reads the trust anchors: each a CA certificate with a subject key identifier,
// by which a leaf's authority key identifier selects it (KEP-6308 "Identity from a
// certificate").
func (x *x509Spec) anchors(path, dir string) ([]*x509.Certificate, readFile, error) {
	data, field := []byte(x.CertificateAuthority), "certificateAuthority"
	var file readFile
	switch {
	case x.CertificateAuthority != "" && x.CertificateAuthorityFile != "":
		return nil, file, fmt.Errorf("%s: certificateAuthority and certificateAuthorityFile are exclusive", path)
	case x.CertificateAuthorityFile != "":
		field = "certificateAuthorityFile"
		f := x.CertificateAuthorityFile
		if !filepath.IsAbs(f) {
			f = filepath.Join(dir, f)
		}
		var err error
		if data, err = os.ReadFile(f); err != nil { //nolint:gosec // the operator names the file
			return nil, file, fmt.Errorf("%s.%s: %w", path, field, err)
		}
		file = readFile{path: f, sum: sha256.Sum256(data)}
	case x.CertificateAuthority == "":
		return nil, file, fmt.Errorf("%s.certificateAuthority: required", path)
	}
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, file, fmt.Errorf("%s.%s: certificate %d: %w", path, field, len(out), err)
		}
		switch {
		case len(c.SubjectKeyId) == 0:
			return nil, file, fmt.Errorf("%s.%s: trust anchor %q has no subject key identifier, which selects it for a certificate's authority key identifier", path, field, c.Subject)
		case !c.IsCA:
			return nil, file, fmt.Errorf("%s.%s: %q is not a CA certificate", path, field, c.Subject)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, file, fmt.Errorf("%s.%s: no PEM certificate in it", path, field)
	}
	return out, file, nil
}
