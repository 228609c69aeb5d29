package verifier

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

// indent puts PEM under a YAML block scalar at depth spaces.
func indent(pemBytes []byte, depth int) string {
	pad := strings.Repeat(" ", depth)
	return pad + strings.ReplaceAll(strings.TrimSpace(string(pemBytes)), "\n", "\n"+pad)
}

// configYAML is a valid configuration with one authenticator per CA, named a0, a1, ...
func configYAML(cas ...*testpki.CA) string {
	var b strings.Builder
	b.WriteString(`apiVersion: apiserver.config.k8s.io/v1alpha1
kind: AuthenticationConfiguration
jwt: []
anonymous: {enabled: false}
httpSignature:
  requiredSignedHeaders:
    X-K8s-Audience: [https://cluster.example]
  maxClockSkew: 3s
  authenticators:
`)
	for i, ca := range cas {
		b.WriteString("  - name: a" + string(rune('0'+i)) + `
    maxAge: 2s
    x509:
      certificateAuthority: |
` + indent(ca.CertPEM, 8) + `
      certificateValidationRules:
      - expression: cert.notAfter - cert.notBefore <= duration('48h')
        message: certificate lifetime must not exceed 48 hours
      claimMappings:
        username:
          expression: '"cert:" + cert.subject.commonName'
        groups:
          expression: cert.subject.organization
        uid:
          expression: cert.serialNumber
        extra:
        - key: example.com/uris
          valueExpression: cert.uriSANs
    userValidationRules:
    - expression: '!user.username.startsWith("system:") && !user.groups.exists(g, g.startsWith("system:"))'
      message: 'this authenticator may not assert an identity under the system: prefix'
`)
	}
	return b.String()
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	ca0, ca1 := testpki.NewTestCA(t, "signing CA 0"), testpki.NewTestCA(t, "signing CA 1")
	var logs bytes.Buffer
	c, err := ParseConfig([]byte(configYAML(ca0, ca1)), "", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"X-K8s-Audience": {"https://cluster.example"}}, c.Policy.RequiredHeaders); diff != "" {
		t.Errorf("required headers (-want +got):\n%s", diff)
	}
	if c.Policy.MaxClockSkew != 3*time.Second || c.Policy.MaxAge != 2*time.Second {
		t.Errorf("policy skew %s, max age %s", c.Policy.MaxClockSkew, c.Policy.MaxAge)
	}
	if diff := cmp.Diff([]string{"a0", "a1"}, c.AuthenticatorNames()); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if c.byKeyID[string(ca1.Cert.SubjectKeyId)].name != "a1" {
		t.Errorf("anchor of CA 1 not indexed under a1")
	}
	if !strings.Contains(logs.String(), "sections=\"[anonymous jwt]\"") {
		t.Errorf("ignored sections not logged: %s", logs.String())
	}
}

// An audience the configuration does not pin is allowed (KEP-6308 "Test Plan"), and the
// operator hears that cross-cluster replay is then not narrowed.
func TestParseConfigWarnsWithoutAudienceValues(t *testing.T) {
	t.Parallel()
	ca0, ca1 := testpki.NewTestCA(t, "signing CA 0"), testpki.NewTestCA(t, "signing CA 1")
	for _, tc := range []struct {
		name, from, to string
		warn           bool
	}{
		{"pinned", "", "", false},
		{"not named", "X-K8s-Audience: [https://cluster.example]", "X-Session-Token: []", true},
	} {
		var logs bytes.Buffer
		doc := configYAML(ca0, ca1)
		if tc.from != "" {
			doc = strings.Replace(doc, tc.from, tc.to, 1)
		}
		c, err := ParseConfig([]byte(doc), "", slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := strings.Contains(logs.String(), "does not list the X-K8s-Audience values"); got != tc.warn {
			t.Errorf("%s: warned %v, want %v: %s", tc.name, got, tc.warn, logs.String())
		}
		if tc.warn && len(c.Policy.RequiredHeaders) != 1 {
			t.Errorf("%s: required headers %v", tc.name, c.Policy.RequiredHeaders)
		}
	}
}

func TestParseConfigCertificateAuthorityFile(t *testing.T) {
	t.Parallel()
	ca := testpki.NewTestCA(t, "signing CA")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(configYAML(ca), "      certificateAuthority: |\n"+indent(ca.CertPEM, 8)+"\n", "      certificateAuthorityFile: ca.pem\n", 1)
	c, err := ParseConfig([]byte(doc), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.byKeyID[string(ca.Cert.SubjectKeyId)] == nil {
		t.Error("anchor from the file not indexed")
	}
}

// selfSigned is a certificate signed by its own key, CA or not; Go gives a CA a subject
// key identifier and a leaf none.
func selfSigned(t *testing.T, key *ecdsa.PrivateKey, isCA bool, cn string, ski []byte) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: isCA, KeyUsage: x509.KeyUsageCertSign, SubjectKeyId: ski,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return testpki.PEM("CERTIFICATE", der)
}

func TestParseConfigRefuses(t *testing.T) {
	t.Parallel()
	ca := testpki.NewTestCA(t, "signing CA")
	good := configYAML(ca)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sameKey := selfSigned(t, key, true, "same key A", []byte{1})
	sameKeyOther := selfSigned(t, key, true, "same key B", []byte{2})
	noSKI := selfSigned(t, key, false, "not a CA", nil)
	caBlock := "      certificateAuthority: |\n" + indent(ca.CertPEM, 8) + "\n"
	withCA := func(doc string, pemBytes []byte) string {
		return strings.Replace(doc, caBlock, "      certificateAuthority: |\n"+indent(pemBytes, 8)+"\n", 1)
	}
	two := configYAML(ca, ca)
	keyTwice := strings.Replace(withCA(two, sameKey), caBlock, "      certificateAuthority: |\n"+indent(sameKeyOther, 8)+"\n", 1)
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"kind", strings.Replace(good, "kind: AuthenticationConfiguration", "kind: Config", 1), `kind: "Config", want AuthenticationConfiguration`},
		{"apiVersion", strings.Replace(good, "apiserver.config.k8s.io/v1alpha1", "v1", 1), `apiVersion: "v1", want one of`},
		{"no section", "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n", "httpSignature: required"},
		{"unknown field", strings.Replace(good, "  maxClockSkew: 3s", "  maxClockSkew: 3s\n  maxClokSkew: 3s", 1), `httpSignature: json: unknown field "maxClokSkew"`},
		{"unknown nested field", strings.Replace(good, "    maxAge: 2s", "    maxAge: 2s\n    nonceHandling: Ignore", 1), `unknown field "nonceHandling"`},
		{"empty audience list", strings.Replace(good, "X-K8s-Audience: [https://cluster.example]", "X-K8s-Audience: []", 1), "httpSignature.requiredSignedHeaders: httpsig: required header X-K8s-Audience needs at least one accepted value"},
		{"reserved authorization", strings.Replace(good, "X-K8s-Audience: [https://cluster.example]", "X-K8s-Audience: [a]\n    Authorization: []", 1), `httpSignature.requiredSignedHeaders: httpsig: required header "Authorization" is reserved`},
		{"reserved impersonate", strings.Replace(good, "X-K8s-Audience: [https://cluster.example]", "X-K8s-Audience: [a]\n    Impersonate-User: []", 1), `httpSignature.requiredSignedHeaders: httpsig: required header "Impersonate-User" is reserved`},
		{"header twice", strings.Replace(good, "X-K8s-Audience: [https://cluster.example]", "X-K8s-Audience: [a]\n    x-k8s-audience: [b]", 1), "named twice"},
		{"bad header name", strings.Replace(good, "X-K8s-Audience: [https://cluster.example]", "X-K8s-Audience: [a]\n    'X Bad': []", 1), `required header "X Bad" is not a valid header name`},
		{"negative skew", strings.Replace(good, "maxClockSkew: 3s", "maxClockSkew: -3s", 1), "httpSignature.maxClockSkew: -3s is negative"},
		{"no authenticators", good[:strings.Index(good, "  authenticators:")] + "  authenticators: []\n", "httpSignature.authenticators: at least one authenticator is required"},
		{"no name", strings.Replace(good, "  - name: a0", "  - name: ''", 1), "httpSignature.authenticators[0].name: required"},
		{"zero max age", strings.Replace(good, "maxAge: 2s", "maxAge: 0s", 1), "httpSignature.authenticators[0] (a0).maxAge: 0s is not positive"},
		{"resolver", strings.Replace(good, "    x509:\n", "    resolver: {endpoint: unix:///r.sock}\n    x509:\n", 1), "httpSignature.authenticators[0] (a0): exactly one of x509 and resolver may be set"},
		{"relative endpoint", good[:strings.Index(good, "    x509:")] + "    resolver: {endpoint: unix://r.sock}\n", `(a0).resolver.endpoint: "unix://r.sock": want unix:///absolute/path`},
		{"abstract endpoint", good[:strings.Index(good, "    x509:")] + "    resolver: {endpoint: 'unix://@r'}\n", `(a0).resolver.endpoint: "unix://@r": want unix:///absolute/path`},
		{"no endpoint", good[:strings.Index(good, "    x509:")] + "    resolver: {keyIDPrefixes: [a]}\n", `(a0).resolver.endpoint: required`},
		{"certificate prefix", good[:strings.Index(good, "    x509:")] + "    resolver: {endpoint: unix:///r.sock, keyIDPrefixes: [x509-sha256]}\n", `keyIDPrefixes[0]: "x509-sha256": certificate key IDs never go to a resolver`},
		{"prefix with slash", good[:strings.Index(good, "    x509:")] + "    resolver: {endpoint: unix:///r.sock, keyIDPrefixes: [a/b]}\n", `keyIDPrefixes[0]: "a/b": want the key ID's part before its first`},
		{"relayed authorization", good[:strings.Index(good, "    x509:")] + "    resolver: {endpoint: unix:///r.sock, relayedHeaders: [authorization]}\n", `relayedHeaders[0]: Authorization has its own configuration path`},
		{"relayed impersonation", good[:strings.Index(good, "    x509:")] + "    resolver: {endpoint: unix:///r.sock, relayedHeaders: [Impersonate-User]}\n", `relayedHeaders[0]: Impersonate-User has its own configuration path`},
		{"nonce handling", good[:strings.Index(good, "    x509:")] + "    resolver: {endpoint: unix:///r.sock, nonceHandling: Never}\n", `(a0).resolver.nonceHandling: "Never": want Consume (the default) or Ignore`},
		{"zero cache keys", good[:strings.Index(good, "    x509:")] + "    resolver: {endpoint: unix:///r.sock, cache: {maxKeys: 0}}\n", `(a0).resolver.cache.maxKeys: 0 is not positive`},
		{"shared prefix", good[:strings.Index(good, "    x509:")] + "    resolver: {endpoint: unix:///r.sock, keyIDPrefixes: [AKIA]}\n  - name: a1\n    resolver: {endpoint: unix:///s.sock, keyIDPrefixes: [AKIA]}\n", `(a1).resolver.keyIDPrefixes: "AKIA" is also authenticator "a0"'s`},
		{"two catch-alls", good[:strings.Index(good, "    x509:")] + "    resolver: {endpoint: unix:///r.sock}\n  - name: a1\n    resolver: {endpoint: unix:///s.sock}\n", `resolvers "a0" and "a1" both list no keyIDPrefixes`},
		{"no backend", good[:strings.Index(good, "    x509:")], "httpSignature.authenticators[0] (a0): one of x509 and resolver is required"},
		{"duplicate names", strings.Replace(configYAML(ca, testpki.NewTestCA(t, "other")), "name: a1", "name: a0", 1), `httpSignature.authenticators[1] (a0).name: "a0" is used by an earlier authenticator`},
		{"anchors share a key id", two, `httpSignature.authenticators[1] (a1).x509: trust anchor "CN=signing CA" has the subject key identifier of one of authenticator "a0"'s`},
		{"anchors share a public key", keyTwice, `httpSignature.authenticators[1] (a1).x509: trust anchor "CN=same key B" has the public key of one of authenticator "a0"'s`},
		{"anchor without key id", withCA(good, noSKI), `httpSignature.authenticators[0] (a0).x509.certificateAuthority: trust anchor "CN=not a CA" has no subject key identifier`},
		{"no PEM", withCA(good, []byte("nothing")), "httpSignature.authenticators[0] (a0).x509.certificateAuthority: no PEM certificate in it"},
		{"no CA", strings.Replace(good, caBlock, "", 1), "httpSignature.authenticators[0] (a0).x509.certificateAuthority: required"},
		{"CEL syntax", strings.Replace(good, `cert.notAfter - cert.notBefore <= duration('48h')`, `cert.notAfter -`, 1), "httpSignature.authenticators[0] (a0).x509.certificateValidationRules[0].expression: compiling"},
		{"rule not bool", strings.Replace(good, `cert.notAfter - cert.notBefore <= duration('48h')`, `'"yes"'`, 1), `certificateValidationRules[0].expression: "\"yes\"" evaluates to string, want bool`},
		{"username not string", strings.Replace(good, `'"cert:" + cert.subject.commonName'`, `'1 + 2'`, 1), `x509.claimMappings.username.expression: "1 + 2" evaluates to int, want string`},
		{"no username", strings.Replace(good, `'"cert:" + cert.subject.commonName'`, `''`, 1), `x509.claimMappings.username.expression: required`},
		{"user rule reads cert", strings.Replace(good, `'!user.username.startsWith("system:") && !user.groups.exists(g, g.startsWith("system:"))'`, `cert.subject.commonName == "x"`, 1), `(a0).userValidationRules[0].expression: compiling`},
		{"extra key not a path", strings.Replace(good, "key: example.com/uris", "key: uris", 1), `x509.claimMappings.extra[0].key: "uris" is not a domain-prefixed path`},
		{"extra key uppercase", strings.Replace(good, "key: example.com/uris", "key: Example.com/uris", 1), `is not lowercase`},
		{"extra key reserved", strings.Replace(good, "key: example.com/uris", "key: authentication.kubernetes.io/x", 1), `under a domain Kubernetes reserves`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(tc.doc), "", nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func parsePEMCertificate(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM")
	}
	return x509.ParseCertificate(block.Bytes)
}
