package cli

import (
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

// TestProxyPluginSigningFlags: flag combinations that cannot work are refused before
// anything starts, with exit code 2 and one message.
func TestProxyPluginSigningFlags(t *testing.T) {
	t.Setenv("KUBERNETES_EXEC_INFO", "")
	const help = "Run 'kplug proxy-plugin --help' for usage.\n"
	for _, tt := range []struct {
		args       string
		wantStderr string
	}{
		{"--sign bogus", "Error: --sign \"bogus\": want sigv4 or rfc9421\n" + help},
		{"--sign sigv4", "Error: --sign sigv4 needs --sigv4-service\n" + help},
		{"--sign sigv4 --sigv4-service eks --sign-key k", "Error: --sign-key, --sign-cert, --sign-key-id, --sign-key-derivation, --sign-audience and --sign-header are for --sign rfc9421\n" + help},
		{"--sign sigv4 --sigv4-service eks --sign-audience a", "Error: --sign-key, --sign-cert, --sign-key-id, --sign-key-derivation, --sign-audience and --sign-header are for --sign rfc9421\n" + help},
		{"--sign rfc9421", "Error: --sign rfc9421 needs --sign-key\n" + help},
		{"--sign rfc9421 --sign-key k --sigv4-region r", "Error: --sigv4-service and --sigv4-region are for --sign sigv4 and --sign-key-derivation aws\n" + help},
		{"--sigv4-region r", "Error: --sigv4-* and --sign-* need --sign\n" + help},
		{"--sign rfc9421 --sign-key-derivation gcp", "Error: --sign-key-derivation \"gcp\": want aws\n" + help},
		{"--sign rfc9421 --sign-key-derivation aws --sign-key k", "Error: --sign-key-derivation aws derives the key from your AWS credentials: it does not go with --sign-key, --sign-cert or --sign-key-id\n" + help},
		{"--sign rfc9421 --sign-key-derivation aws --sign-audience a", "Error: --sign-key-derivation aws needs --sigv4-service, the service the derived key is scoped to (for EKS: eks)\n" + help},
		{"--sign rfc9421 --sign-key-derivation aws --sigv4-service eks", "Error: --sign rfc9421 needs --sign-audience, the X-K8s-Audience value naming the cluster (KEP-6308 refuses to sign without one)\n" + help},
		{"--sign-header X-A=b", "Error: --sigv4-* and --sign-* need --sign\n" + help},
		{"--sign rfc9421 --sign-key k --sign-audience a", "Error: --sign rfc9421 needs --sign-cert (the key's certificate is the identity) or --sign-key-id (the name the verifier knows the key by)\n" + help},
		{"--sign rfc9421 --sign-key k --sign-cert c --sign-key-id i --sign-audience a", "Error: --sign-cert and --sign-key-id are exclusive: a certificate key's keyid is the certificate's digest\n" + help},
		{"--sign rfc9421 --sign-key k --sign-key-id i", "Error: --sign rfc9421 needs --sign-audience, the X-K8s-Audience value naming the cluster (KEP-6308 refuses to sign without one)\n" + help},
		{"--sign rfc9421 --sign-key k --sign-key-id i --sign-audience a --sign-header novalue", "Error: invalid --sign-header novalue: want NAME=VALUE or NAME=@FILE, where NAME is a header name\n" + help},
		{"--sign rfc9421 --sign-key k --sign-key-id i --sign-audience a --sign-header X-K8s-Audience=b", "Error: --sign-header X-K8s-Audience: given twice (or as --sign-audience)\n" + help},
		{"--sign rfc9421 --sign-key k --sign-key-id i --sign-audience a --sign-header X-Token=@/nonexistent/t", "Error: --sign-header X-Token=@/nonexistent/t: open /nonexistent/t: no such file or directory\n"},
		{"--sign rfc9421 --sign-key /nonexistent/k --sign-key-id i --sign-audience a", "Error: --sign-key: reading key: open /nonexistent/k: no such file or directory\n"},
		{"--sign rfc9421 --sign-key /nonexistent/k --sign-cert /nonexistent/c --sign-audience a", "Error: --sign-cert: open /nonexistent/c: no such file or directory\n"},
		{"--client-cert /nonexistent/c --client-key kms:alias/k", "Error: --client-key: key URI \"kms:alias/k\": unsupported scheme \"kms\": want a file path, file:PATH, a pkcs11: or a tpm: URI\n"},
		{"--client-cert /nonexistent/c", "Error: --client-cert and --client-key go together (--client-cert may be left out when the key and its certificate are on a PKCS#11 token)\n" + help},
		{"--client-key /nonexistent/k", "Error: --client-cert and --client-key go together (--client-cert may be left out when the key and its certificate are on a PKCS#11 token)\n" + help},
	} {
		code, out, errOut := run(t, append([]string{"proxy-plugin"}, strings.Fields(tt.args)...)...)
		if code != ExitUsage || out != "" || errOut != tt.wantStderr {
			t.Errorf("kplug proxy-plugin %s: code %d, stdout %q\nstderr %q\nwant   %q", tt.args, code, out, errOut, tt.wantStderr)
		}
	}
}

// TestProxyPluginSigningKeyChecks: a certificate that is not the key's, or a header the
// profile reserves, stops proxy-plugin at start with exit code 2.
func TestProxyPluginSigningKeyChecks(t *testing.T) {
	t.Setenv("KUBERNETES_EXEC_INFO", "")
	ca := testpki.NewTestCA(t, "signing CA")
	alice, err := ca.IssueClient("alice", "alice")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := ca.IssueClient("bob", "bob")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ args, wantStderr string }{
		{"--sign rfc9421 --sign-key " + alice.KeyFile + " --sign-cert " + bob.CertFile + " --sign-audience a",
			"Error: --sign rfc9421: httpsig: the certificate is not for the signing key\n"},
		{"--sign rfc9421 --sign-key " + alice.KeyFile + " --sign-cert " + alice.CertFile + " --sign-audience a --sign-header Authorization=x",
			"Error: --sign rfc9421: httpsig: signed header \"Authorization\" is reserved"},
	} {
		code, out, errOut := run(t, append([]string{"proxy-plugin"}, strings.Fields(tt.args)...)...)
		if code != ExitUsage || out != "" || !strings.HasPrefix(errOut, tt.wantStderr) {
			t.Errorf("kplug proxy-plugin %s: code %d, stdout %q\nstderr %q\nwant   %q", tt.args, code, out, errOut, tt.wantStderr)
		}
	}
}
