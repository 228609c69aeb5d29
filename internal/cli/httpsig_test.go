package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/httpsigtest"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

const signingAudience = "https://k.example"

// signingKubeconfig writes a kubeconfig whose current context reaches srv as a user
// whose user: block is user (YAML, indented four spaces), and returns its path.
func signingKubeconfig(t *testing.T, srv *httpsigtest.Server, user string) string {
	t.Helper()
	dir := t.TempDir()
	caFile := writeServerCA(t, srv.Server)
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority: %q}
users:
- name: signer
  user:
%s
contexts:
- name: signer
  context: {cluster: c, user: signer}
current-context: signer
`, srv.URL, caFile, user)
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// signingPluginUser is a user: block whose exec plugin answers with out.
func signingPluginUser(p *exectest.Plugin) string {
	return fmt.Sprintf(`    httpSignature:
      apiVersion: client.authentication.k8s.io/v1alpha1
      signedHeaders: [{name: X-Session}]
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: %q
      interactiveMode: Never
      env: [{name: %s, value: %q}]`, p.Path(), exectest.Env, p.Dir)
}

// signingMaterial is a plugin's answer with an ECDSA key and its certificate, a session
// header and the audience; it returns the answer, the certificate's keyid, and strings
// of the key and the session value to look for where they must not be.
func signingMaterial(t *testing.T) (answer, keyID string, secrets []string) {
	t.Helper()
	kp, err := testpki.NewTestCA(t, "cli-signing-ca").IssueClient("signer", "alice")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{
		"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
		"status": map[string]any{"httpSignature": map[string]any{
			"privateKey": string(kp.KeyPEM), "certificate": string(kp.CertPEM),
			"signedHeaders": map[string]string{httpsig.AudienceHeader: signingAudience, "X-Session": "session-s3cr3t-0123456789"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(kp.CertPEM)
	sum := sha256.Sum256(block.Bytes)
	keyBody := strings.Split(string(kp.KeyPEM), "\n")[1] // the first line of the key's base64
	return string(b), httpsig.CertificateKeyIDPrefix + hex.EncodeToString(sum[:]), []string{keyBody, "session-s3cr3t-0123456789"}
}

// TestRequestSignsWithPluginKey: kplug request signs each request in process with the
// key the exec plugin returned (GET, POST with a body): the verifier accepts it under the
// certificate's keyid, and no bearer token is sent.
func TestRequestSignsWithPluginKey(t *testing.T) {
	t.Parallel()
	srv := httpsigtest.NewTLS(t, signingAudience, nil)
	answer, keyID, _ := signingMaterial(t)
	p := exectest.New(t).Stdout(answer)
	kc := signingKubeconfig(t, srv, signingPluginUser(p))
	for _, args := range [][]string{{"/api"}, {"-d", `{"kind":"SelfSubjectReview"}`, "/apis/authentication.k8s.io/v1/selfsubjectreviews"}} {
		code, out, errOut := run(t, append([]string{"request", "--kubeconfig", kc}, args...)...)
		if code != ExitOK || out != keyID || errOut != "" {
			t.Errorf("%v: code %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	for _, r := range srv.Requests() {
		if r.Err != "" || r.Authorization != "" {
			t.Errorf("%s %s: Authorization %q, refused: %s", r.Method, r.Path, r.Authorization, r.Err)
		}
	}
}

// TestRequestSignsWithKeyFiles: a user with certFile and keyFile, named relative to the
// kubeconfig, signs each request; the audience is the kubeconfig's value.
func TestRequestSignsWithKeyFiles(t *testing.T) {
	t.Parallel()
	srv := httpsigtest.NewTLS(t, signingAudience, nil)
	kp, err := testpki.NewTestCA(t, "cli-signing-ca").IssueClient("signer", "alice")
	if err != nil {
		t.Fatal(err)
	}
	kc := signingKubeconfig(t, srv, fmt.Sprintf(`    httpSignature:
      apiVersion: client.authentication.k8s.io/v1alpha1
      certFile: keys/tls.crt
      keyFile: keys/tls.key
      signedHeaders: [{name: X-K8s-Audience, value: %q}]`, signingAudience))
	keys := filepath.Join(filepath.Dir(kc), "keys")
	if err := os.Mkdir(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM} {
		if err := os.WriteFile(filepath.Join(keys, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := run(t, "request", "--kubeconfig", kc, "/api")
	if code != ExitOK || !strings.HasPrefix(out, httpsig.CertificateKeyIDPrefix) || errOut != "" {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestCredentialRedactsSigningMaterial: kplug credential shows which key a plugin
// returned, never the key, and the signed headers' values only with --show-token.
func TestCredentialRedactsSigningMaterial(t *testing.T) {
	t.Parallel()
	srv := httpsigtest.NewTLS(t, signingAudience, nil)
	answer, keyID, secrets := signingMaterial(t)
	p := exectest.New(t).Stdout(answer)
	kc := signingKubeconfig(t, srv, signingPluginUser(p))

	code, out, errOut := run(t, "credential", "--kubeconfig", kc)
	want := regexp.MustCompile(`^plugin:      \S+ \(client.authentication.k8s.io/v1\)
credential:  httpSignature signing key
keyid:       ` + keyID + `
algorithm:   ecdsa-p256-sha256
header:      X-K8s-Audience: <redacted, 17 bytes>
header:      X-Session: <redacted, 25 bytes>
expires:     never \(kept until the server rejects it\)
subject:     CN=alice
issuer:      CN=cli-signing-ca
not after:   \S+ \(in \S+\)
$`)
	if code != ExitOK || !want.MatchString(out) || errOut != "" {
		t.Errorf("code %d\nstdout %s\nstderr %q", code, out, errOut)
	}
	code, jsonOut, _ := run(t, "credential", "--kubeconfig", kc, "-o", "json")
	if code != ExitOK || !strings.Contains(jsonOut, `"X-Session": "<redacted, 25 bytes>"`) {
		t.Errorf("json: code %d\n%s", code, jsonOut)
	}
	code, shown, _ := run(t, "credential", "--kubeconfig", kc, "-o", "json", "--show-token")
	if code != ExitOK || !strings.Contains(shown, secrets[1]) {
		t.Errorf("--show-token: code %d\n%s", code, shown)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) || strings.Contains(jsonOut, s) {
			t.Errorf("%q printed without --show-token", s)
		}
	}
	if strings.Contains(shown, secrets[0]) || strings.Contains(shown, "PRIVATE KEY") {
		t.Error("the private key printed with --show-token")
	}
}

// TestSigningMaterialNeverLogged: at the highest verbosity, kplug request and kplug
// credential log nothing of the plugin's key or signed header values, when they succeed
// and when the material is refused.
func TestSigningMaterialNeverLogged(t *testing.T) {
	t.Parallel()
	srv := httpsigtest.NewTLS(t, signingAudience, nil)
	answer, _, secrets := signingMaterial(t)
	good := exectest.New(t).Stdout(answer)
	noAudience := exectest.New(t).Stdout(strings.Replace(answer, httpsig.AudienceHeader, "X-Other", 1))
	for _, tc := range []struct {
		plugin *exectest.Plugin
		args   []string
		code   int
	}{
		{good, []string{"request", "/api"}, ExitOK},
		{good, []string{"credential"}, ExitOK},
		{noAudience, []string{"request", "/api"}, ExitFailure},
		{noAudience, []string{"credential"}, ExitFailure},
	} {
		kc := signingKubeconfig(t, srv, signingPluginUser(tc.plugin))
		code, _, errOut := run(t, append([]string{"-v=10", "--kubeconfig", kc}, tc.args...)...)
		if code != tc.code || code == ExitOK && !strings.Contains(errOut, "level=DEBUG") {
			t.Errorf("%v: code %d, want %d; stderr %s", tc.args, code, tc.code, errOut)
		}
		for _, s := range secrets {
			if strings.Contains(errOut, s) {
				t.Errorf("%v: the log holds %q:\n%s", tc.args, s, errOut)
			}
		}
	}
}

// TestRequestSignsWithKUBECONFIGMerge: with $KUBECONFIG naming two files, the block of the
// first file that defines the user counts, as clientcmd merges users, and its relative
// key files are resolved against that file's directory; the second file's definition of
// the user (a token) is ignored.
func TestRequestSignsWithKUBECONFIGMerge(t *testing.T) {
	srv := httpsigtest.NewTLS(t, signingAudience, nil)
	kp, err := testpki.NewTestCA(t, "cli-signing-ca").IssueClient("signer", "alice")
	if err != nil {
		t.Fatal(err)
	}
	second := signingKubeconfig(t, srv, "    token: not-this-one")
	firstDir := t.TempDir()
	bundle := filepath.Join(firstDir, "keys", "bundle.pem")
	if err := os.MkdirAll(filepath.Dir(bundle), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundle, append(kp.CertPEM, kp.KeyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(firstDir, "config")
	if err := os.WriteFile(first, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: signer
  user:
    httpSignature:
      apiVersion: client.authentication.k8s.io/v1alpha1
      credentialBundleFile: keys/bundle.pem
      signedHeaders: [{name: X-K8s-Audience, value: %q}]
`, signingAudience)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", first+string(os.PathListSeparator)+second)
	code, out, errOut := run(t, "request", "/api")
	if code != ExitOK || !strings.HasPrefix(out, httpsig.CertificateKeyIDPrefix) || errOut != "" {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, r := range srv.Requests() {
		if r.Authorization != "" {
			t.Errorf("Authorization %q sent", r.Authorization)
		}
	}
}

// kplug run refuses a user who signs requests before it runs the plugin: an unmodified
// client cannot sign, and the signing material would be fetched for nothing.
func TestRunRefusesASigningUserBeforeThePluginRuns(t *testing.T) {
	t.Parallel()
	srv := httpsigtest.NewTLS(t, signingAudience, nil)
	answer, _, _ := signingMaterial(t)
	p := exectest.New(t).Stdout(answer)
	kc := signingKubeconfig(t, srv, signingPluginUser(p))
	code, out, errOut := run(t, "run", "--kubeconfig", kc, "--", "true")
	if code != ExitUsage || out != "" || !strings.Contains(errOut, "the context's user signs requests (httpSignature)") {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if n := len(p.Calls()); n != 0 {
		t.Errorf("the plugin ran %d times", n)
	}
}
