package execcred

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeFile writes content to dir/name and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubeconfigUsers is a kubeconfig with the users given as YAML list items.
func kubeconfigUsers(users ...string) string {
	return "apiVersion: v1\nkind: Config\nusers:\n" + strings.Join(users, "\n") + "\n"
}

const filesUser = `- name: u
  user:
    httpSignature:
      apiVersion: client.authentication.k8s.io/v1alpha1
      ttl: 30s
      certFile: keys/tls.crt
      keyFile: /abs/tls.key
      signedHeaders:
      - {name: X-K8s-Audience, value: https://k.example}`

// TestLoadHTTPSignatureMergeAndPaths: the first file of the precedence that defines the
// user is the one that counts, as in clientcmd's merge, even when it has no block;
// missing files are skipped; relative paths are resolved against the directory of the
// file that names them.
func TestLoadHTTPSignatureMergeAndPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	withBlock := writeFile(t, dir, "a/config", kubeconfigUsers(filesUser))
	withoutBlock := writeFile(t, dir, "b/config", kubeconfigUsers("- name: u\n  user: {token: t}"))
	other := writeFile(t, dir, "c/config", kubeconfigUsers("- name: someone-else\n  user: {token: t}"))
	missing := filepath.Join(dir, "missing")

	got, err := LoadHTTPSignature([]string{missing, other, withBlock, withoutBlock}, "u")
	if err != nil {
		t.Fatal(err)
	}
	want := &HTTPSignature{
		APIVersion: HTTPSignatureAPIVersion, TTL: "30s",
		CertFile: filepath.Join(dir, "a", "keys", "tls.crt"), KeyFile: "/abs/tls.key",
		SignedHeaders: []SignedHeader{{Name: "X-K8s-Audience", Value: "https://k.example"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("block (-want +got):\n%s", diff)
	}

	if got, err := LoadHTTPSignature([]string{withoutBlock, withBlock}, "u"); err != nil || got != nil {
		t.Errorf("the first file defines the user without a block: %+v, %v; want none", got, err)
	}
	if got, err := LoadHTTPSignature([]string{other}, "u"); err != nil || got != nil {
		t.Errorf("no file defines the user: %+v, %v; want none", got, err)
	}
}

// TestLoadHTTPSignatureURIKeyFile: a keyFile that is a pkcs11: URI is kept as it is, not
// made a path.
func TestLoadHTTPSignatureURIKeyFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, t.TempDir(), "config", kubeconfigUsers(strings.Replace(filesUser, "/abs/tls.key", "'pkcs11:token=t;object=k'", 1)))
	got, err := LoadHTTPSignature([]string{path}, "u")
	if err != nil || got.KeyFile != "pkcs11:token=t;object=k" {
		t.Errorf("keyFile %q, %v", got.KeyFile, err)
	}
}

// TestLoadHTTPSignatureErrors: each invalid block is refused with a message that says
// what is wrong and names the file and user.
func TestLoadHTTPSignatureErrors(t *testing.T) {
	t.Parallel()
	block := func(lines ...string) string {
		return "- name: u\n  user:\n    httpSignature:\n      " + strings.Join(lines, "\n      ")
	}
	const (
		api      = "apiVersion: client.authentication.k8s.io/v1alpha1"
		audience = "signedHeaders: [{name: X-K8s-Audience, value: a}]"
	)
	for _, tc := range []struct{ user, err string }{
		{block("apiVersion: client.authentication.k8s.io/v1"), `httpSignature: apiVersion "client.authentication.k8s.io/v1": want client.authentication.k8s.io/v1alpha1`},
		{block(api, "keyfile: k"), `httpSignature: unknown field "keyfile"`},
		{block(api, "keyDerivation: {kind: hmac-ladder}"), `httpSignature.keyDerivation.hash "": want sha-256 or sha-512 (the hash of derivation; signatures are hmac-sha256 either way)`},
		{block(api, "credentialBundleFile: b", "certFile: c", "keyFile: k", audience), "httpSignature: credentialBundleFile and certFile/keyFile are two forms of the same thing: set one"},
		{block(api, "certFile: c", audience), "httpSignature: certFile and keyFile go together: the certificate is the key's identity (a key without a certificate comes from an exec plugin, with its keyID)"},
		{block(api, "ttl: soon"), `httpSignature.ttl "soon": want a positive duration such as 30s`},
		{block(api, "certFile: c", "keyFile: k"), "httpSignature: no value for X-K8s-Audience, which every signature carries against cross-cluster replay: set it in the kubeconfig: httpSignature.signedHeaders: [{name: X-K8s-Audience, value: <the cluster's audience, as the verifier's requiredSignedHeaders lists it>}]"},
		{block(api, "certFile: c", "keyFile: k", "signedHeaders: [{name: X-K8s-Audience}]"), "httpSignature.signedHeaders: X-K8s-Audience needs a value: with key files, the kubeconfig gives every signed header's value"},
		{block(api, audience), "httpSignature.signedHeaders: X-K8s-Audience has a value, but the key comes from the exec plugin, which returns the values (status.httpSignature.signedHeaders): list the name alone"},
		{block(api, "signedHeaders: [{name: Impersonate-User}]"), `httpSignature.signedHeaders: Impersonate-User is reserved and cannot be a configured signed header (KEP-6308 "Required signed headers")`},
		{block(api, "signedHeaders: [{name: X-A}, {name: x-a}]"), "httpSignature.signedHeaders: x-a is listed twice"},
		{block(api, "signedHeaders: [{value: v}]"), "httpSignature.signedHeaders: a header without a name"},
	} {
		path := writeFile(t, t.TempDir(), "config", kubeconfigUsers(tc.user))
		_, err := LoadHTTPSignature([]string{path}, "u")
		if want := "kubeconfig " + path + `: user "u": ` + tc.err; err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", tc.user, err, want)
		}
	}
}
