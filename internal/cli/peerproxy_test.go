package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPeerproxyInvalidConfigurationExitsTwo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"nothing given", []string{"peerproxy"},
			"Error: --kubeconfig is required\n--tls-cert-file is required\n--tls-private-key-file is required\n--requestheader-client-ca-file is required\n--proxy-client-cert-file is required\n--proxy-client-key-file is required\n--peer-ca-file is required\n"},
		{"unreadable files", []string{"peerproxy", "--kubeconfig=" + filepath.Join(dir, "kc"), "--tls-cert-file=" + filepath.Join(dir, "missing.crt"),
			"--tls-private-key-file=k", "--requestheader-client-ca-file=" + notPEM, "--proxy-client-cert-file=p", "--proxy-client-key-file=p",
			"--peer-ca-file=" + notPEM, "--listen-address=:6444"}, ""},
		{"one CA for users and peers, no allowed names", []string{"peerproxy", "--kubeconfig=kc", "--tls-cert-file=c", "--tls-private-key-file=k",
			"--client-ca-file=" + notPEM, "--requestheader-client-ca-file=" + notPEM, "--proxy-client-cert-file=p", "--proxy-client-key-file=p",
			"--peer-ca-file=" + notPEM}, ""},
		{"arguments", []string{"peerproxy", "extra"}, "Error: unknown command \"extra\" for \"kplug peerproxy\"\nRun 'kplug peerproxy --help' for usage.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := run(t, tt.args...)
			if code != ExitUsage || out != "" {
				t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
			}
			if tt.wantStderr != "" && errOut != tt.wantStderr {
				t.Errorf("stderr\n%q\nwant\n%q", errOut, tt.wantStderr)
			}
			if tt.name == "one CA for users and peers, no allowed names" && !strings.Contains(errOut, "every user's client certificate would be trusted to assert any identity") {
				t.Errorf("stderr lacks the shared-CA error:\n%s", errOut)
			}
			if tt.name == "unreadable files" {
				for _, want := range []string{
					"--tls-cert-file/--tls-private-key-file: loading certificate " + filepath.Join(dir, "missing.crt") + " and key k: open " + filepath.Join(dir, "missing.crt") + ": no such file or directory",
					"--peer-ca-file " + notPEM + ": no PEM certificate in it",
					"--requestheader-client-ca-file " + notPEM + ": no PEM certificate in it",
					`--advertise-address is required when --listen-address ":6444" names no host`,
				} {
					if !strings.Contains(errOut, want) {
						t.Errorf("stderr lacks %q:\n%s", want, errOut)
					}
				}
			}
		})
	}
}
