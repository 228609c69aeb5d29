package execcache

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// secretArgs are plugin arguments as real plugins take secrets (int128/kubelogin,
// Azure kubelogin, client-keystone-auth, OIDC and token-exchange helpers, PKCS#11 URIs),
// each secret marked S3CR3T, with what --list must show of them.
var secretArgs = []struct{ args, want []string }{
	{[]string{"--client-secret", "S3CR3T-1", "--password=S3CR3T-2"},
		[]string{"--client-secret", redacted, "--password=" + redacted}},
	{[]string{"--passphrase=S3CR3T-3", "--pin", "S3CR3T-4", "--pass", "-S3CR3T-5", "--user-pin=S3CR3T-4b"},
		[]string{"--passphrase=" + redacted, "--pin", redacted, "--pass", redacted, "--user-pin=" + redacted}},
	{[]string{"--header", "Authorization: Bearer S3CR3T-6", "--auth=S3CR3T-7", "--cookie", "session=S3CR3T-7b"},
		[]string{"--header", redacted, "--auth=" + redacted, "--cookie", redacted}},
	{[]string{"--oidc-issuer-url=https://alice:S3CR3T-8@idp.example/realms/x", "--endpoint", "https://sts.example/token?audience=a&client_secret=S3CR3T-9#access_token=S3CR3T-9b"},
		[]string{"--oidc-issuer-url=https://alice:" + redacted + "@idp.example/realms/x", "--endpoint", "https://sts.example/token?audience=a&client_secret=" + redacted + "#access_token=" + redacted}},
	{[]string{"--signer=pkcs11:token=kplug;object=alice?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-value=S3CR3T-10"},
		[]string{"--signer=pkcs11:token=kplug;object=alice?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-value=" + redacted}},
	{[]string{"login", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJTM0NSM1QifQ.S3CR3T-11_sig", "password=S3CR3T-12", "Bearer S3CR3T-13"},
		[]string{"login", redacted, "password=" + redacted, redacted}},
	{[]string{"--aws-secret", "wJalrXUtnFEMI/K7MDENG/bPxRfiS3CR3T14EXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiS3CR3T14bEXAMPLEKEY", "--hmac=0123456789abcdef0123456789abcdef01234567"},
		[]string{"--aws-secret", redacted, redacted, "--hmac=" + redacted}},
	// What identifies an entry stays readable.
	{[]string{"token", "-i", "prod", "--cluster-name", "my-cluster", "--region=eu-west-1", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630",
		"--role-arn=arn:aws:iam::123456789012:role/puller", "--certificate-authority=/etc/ca.crt", "--login", "devicecode"},
		[]string{"token", "-i", "prod", "--cluster-name", "my-cluster", "--region=eu-west-1", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630",
			"--role-arn=arn:aws:iam::123456789012:role/puller", "--certificate-authority=/etc/ca.crt", "--login", "devicecode"}},
}

func TestRedactArgs(t *testing.T) {
	t.Parallel()
	for _, tt := range secretArgs {
		if diff := cmp.Diff(tt.want, redactArgs(tt.args)); diff != "" {
			t.Errorf("redactArgs(%q) (-want +got):\n%s", tt.args, diff)
		}
	}
	for in, want := range map[string]string{
		"https://h:6443":                       "https://h:6443",
		"https://u:p@h:6443/x?token=t&a=b":     "https://u:" + redacted + "@h:6443/x?token=" + redacted + "&a=b",
		"https://h/@x:y":                       "https://h/@x:y", // an @ in the path is no user
		"db:5432":                              "db:5432",
		"ABCDEF0123456789ABCDEF0123456789":     redacted,
		"my-cluster-production-eu-west-1-blue": "my-cluster-production-eu-west-1-blue",
	} {
		if got := redactValue(in); got != want {
			t.Errorf("redactValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSecurityListShowsNoPartOfACredential covers the suspicion that `exec-cache --list`
// shows parts of a credential: entries made by real runs of a plugin that answers with a
// token, a client certificate and its key, for a cluster whose URL holds a password, with
// secrets in the plugin's arguments as real plugins take them, listed in every output
// format, show none of it.
func TestSecurityListShowsNoPartOfACredential(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	client, err := testpki.NewTestCA(t, "execcache-list-ca").IssueClient("list-client", "list-user")
	if err != nil {
		t.Fatal(err)
	}
	token := "S3CR3T-token-" + strings.Repeat("t0k3n", 40)
	answer, err := json.Marshal(map[string]any{
		"apiVersion": execcred.V1, "kind": "ExecCredential",
		"status": map[string]any{
			"token": token, "clientCertificateData": string(client.CertPEM), "clientKeyData": string(client.KeyPEM),
			"expirationTimestamp": h.now.Add(time.Hour).Format(time.RFC3339),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.plugin.Stdout(string(answer))
	info := execInfoEnv(t, execcred.V1, &wire.Cluster{Server: "https://admin:S3CR3T-server@cluster.example:6443", Config: []byte("null")}, nil)
	for _, tt := range secretArgs {
		h.opts.Args = append([]string{"-test.run=^$"}, tt.args...)
		if out, err := h.call(kubectlA, info); err != nil || !strings.Contains(out, token) {
			t.Fatalf("run with %q: %v", tt.args, err)
		}
	}
	if n := len(h.entryFiles()); n != len(secretArgs) {
		t.Fatalf("%d entries, want %d", n, len(secretArgs))
	}

	// What must not show: each marked secret, and any line of the certificate or key.
	secrets := []string{"S3CR3T-", "t0k3n"}
	for _, pem := range [][]byte{client.CertPEM, client.KeyPEM} {
		for line := range strings.Lines(string(pem)) {
			if line = strings.TrimSpace(line); len(line) > 16 && !strings.HasPrefix(line, "-----") {
				secrets = append(secrets, line[:16])
			}
		}
	}
	listings := map[string]string{}
	for _, format := range []string{"text", "json", "yaml"} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), "kplug-exec-cache", []string{"--cache-dir", h.cache, "--list", "-o", format},
			Process{Environ: os.Environ(), Stdout: &stdout, Stderr: &stderr})
		if code != 0 {
			t.Fatalf("--list -o %s: exit %d: %s", format, code, stderr.String())
		}
		listings[format] = stdout.String()
		for _, s := range secrets {
			if strings.Contains(stdout.String(), s) {
				t.Errorf("--list -o %s shows %q:\n%s", format, s, stdout.String())
			}
		}
	}
	// And it still says what each entry is.
	var listed []Listed
	if err := json.Unmarshal([]byte(listings["json"]), &listed); err != nil {
		t.Fatal(err)
	}
	var gotArgs [][]string
	for _, l := range listed {
		if l.Credential != fmt.Sprintf("token (%d bytes) and client certificate (CN=list-user)", len(token)) || l.Server != "https://admin:"+redacted+"@cluster.example:6443" {
			t.Errorf("entry %s: credential %q, server %q", l.ID, l.Credential, l.Server)
		}
		gotArgs = append(gotArgs, l.Args[1:]) // after -test.run
	}
	var wantArgs [][]string
	for _, tt := range secretArgs {
		wantArgs = append(wantArgs, tt.want)
	}
	sortArgs := func(a, b []string) int { return strings.Compare(strings.Join(a, " "), strings.Join(b, " ")) }
	slices.SortFunc(gotArgs, sortArgs)
	slices.SortFunc(wantArgs, sortArgs)
	if diff := cmp.Diff(wantArgs, gotArgs); diff != "" {
		t.Errorf("listed arguments (-want +got):\n%s", diff)
	}
	if !strings.Contains(listings["text"], "token -i prod --cluster-name my-cluster --region=eu-west-1") {
		t.Errorf("the text listing hides what identifies an entry:\n%s", listings["text"])
	}
}
