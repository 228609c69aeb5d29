package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSignatureProxyInvalidConfigurationExitsTwo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCert(t, dir, "serving", "127.0.0.1")
	config := filepath.Join(dir, "authn.yaml")
	if err := os.WriteFile(config, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\nhttpSignature:\n  requiredSignedHeaders: {X-K8s-Audience: []}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := []string{"--apiserver-ca-file=" + caFile, "--proxy-client-cert-file=" + certFile, "--proxy-client-key-file=" + keyFile,
		"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile}
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"nothing given", []string{"signature-proxy"},
			"Error: --authentication-config is required\n--apiserver is required\n--apiserver-ca-file is required\n--proxy-client-cert-file is required\n--proxy-client-key-file is required\n--tls-cert-file is required\n--tls-private-key-file is required\n"},
		{"plain http upstream", append([]string{"signature-proxy", "--authentication-config=" + config, "--apiserver=http://127.0.0.1:6443"}, files...),
			"Error: --apiserver \"http://127.0.0.1:6443\": want an https:// URL\n"},
		// Issue 32: the names before both servers took kube-apiserver's still work, and say which to use.
		{"deprecated names", []string{"signature-proxy", "--authentication-config=" + config, "--upstream=http://127.0.0.1:6443", "--upstream-ca=" + caFile,
			"--proxy-client-cert=" + certFile, "--proxy-client-key=" + keyFile, "--listen=127.0.0.1:6445", "--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile},
			"Flag --upstream has been deprecated, use --apiserver\nFlag --upstream-ca has been deprecated, use --apiserver-ca-file\n" +
				"Flag --proxy-client-cert has been deprecated, use --proxy-client-cert-file\nFlag --proxy-client-key has been deprecated, use --proxy-client-key-file\n" +
				"Flag --listen has been deprecated, use --listen-address\nError: --apiserver \"http://127.0.0.1:6443\": want an https:// URL\n"},
		{"invalid configuration", append([]string{"signature-proxy", "--authentication-config=" + config, "--apiserver=https://127.0.0.1:6443"}, files...),
			"Error: " + config + ": httpSignature.requiredSignedHeaders: httpsig: required header X-K8s-Audience needs at least one accepted value naming this cluster\n"},
		{"limits", append([]string{"signature-proxy", "--authentication-config=" + config, "--apiserver=https://127.0.0.1:6443", "--max-connections=0", "--max-request-header-bytes=100", "--max-buffered-body-bytes=3145728", "--body-read-timeout=0s"}, files...),
			"Error: --max-connections 0: must be positive\n--max-request-header-bytes 100: must be at least 4096\n--max-buffered-body-bytes 3145728: must be more than 3145728, kube-apiserver's largest request body\n--body-read-timeout 0s: must be positive\n"},
		{"request-header names", append([]string{"signature-proxy", "--authentication-config=" + config, "--apiserver=https://127.0.0.1:6443", "--requestheader-username-headers=",
			"--requestheader-group-headers=X-Remote-Group,X Groups", "--requestheader-extra-headers-prefix=X-Extra:"}, files...),
			"Error: --requestheader-username-headers is empty: the proxy needs a header to name the user in\n--requestheader-group-headers \"X Groups\": not a header name\n--requestheader-extra-headers-prefix \"X-Extra:\": not a header name\n"},
		{"arguments", []string{"signature-proxy", "extra"}, "Error: unknown command \"extra\" for \"kplug signature-proxy\"\nRun 'kplug signature-proxy --help' for usage.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, tt.args...)
			if code != ExitUsage || out != "" || errOut != tt.wantStderr {
				t.Errorf("code %d, stdout %q, stderr\n%q\nwant\n%q", code, out, errOut, tt.wantStderr)
			}
			if strings.Contains(errOut, "PRIVATE KEY") {
				t.Error("key material in the error")
			}
		})
	}
}
