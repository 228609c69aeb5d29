package cli

import (
	"strings"
	"testing"
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
		{"--sign sigv4 --sigv4-service eks --sign-key k", "Error: --sign-key and --sign-key-id are for --sign rfc9421\n" + help},
		{"--sign rfc9421", "Error: --sign rfc9421 needs --sign-key\n" + help},
		{"--sign rfc9421 --sign-key k --sigv4-region r", "Error: --sigv4-service and --sigv4-region are for --sign sigv4\n" + help},
		{"--sigv4-region r", "Error: --sigv4-* and --sign-key* need --sign\n" + help},
		{"--sign rfc9421 --sign-key /nonexistent/k", "Error: --sign-key: reading key: open /nonexistent/k: no such file or directory\n"},
		{"--client-cert /nonexistent/c --client-key kms:alias/k", "Error: --client-key: key URI \"kms:alias/k\": unsupported scheme \"kms\": want a file path, file:PATH or a pkcs11 URI\n"},
		{"--client-cert /nonexistent/c", "Error: --client-cert and --client-key go together (--client-cert may be left out when the key and its certificate are on a PKCS#11 token)\n" + help},
		{"--client-key /nonexistent/k", "Error: --client-cert and --client-key go together (--client-cert may be left out when the key and its certificate are on a PKCS#11 token)\n" + help},
	} {
		code, out, errOut := run(t, append([]string{"proxy-plugin"}, strings.Fields(tt.args)...)...)
		if code != ExitUsage || out != "" || errOut != tt.wantStderr {
			t.Errorf("kplug proxy-plugin %s: code %d, stdout %q\nstderr %q\nwant   %q", tt.args, code, out, errOut, tt.wantStderr)
		}
	}
}
