package e2e

import (
	"bytes"
	"context"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestSecurityExecBlockCannotChooseTheTPM (the issue 30 review's F1 and the second
// review's N1, through the real kubectl): under a kuberc policy that restricts plugins, an
// exec block that runs kplug proxy-plugin may not choose the TPM its key's auth value goes
// to (device= in a tpm: URI, or $KPLUG_TPM_DEVICE in its env), the file read as that auth
// value (pin-source=), nor the PIN itself ($KPLUG_TPM_PIN, $KPLUG_PKCS11_PIN), each wrong
// one counting towards locking out every key of the TPM or token.
// The "TPM" is a listener that records what it is sent, in a private directory of the
// user's (so that kplug's own socket checks pass): under the policy it must receive
// nothing. Without a policy the same exec blocks do reach it, which shows that the
// policy, and not something else, is what stops them.
func TestSecurityExecBlockCannotChooseTheTPM(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	buildBinary(t, bin, "./cmd/kplug", "kplug")

	// A key file that looks like a TPM key, so that kplug goes to the TPM with it.
	sockDir, err := os.MkdirTemp("", "tpmsec")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	socket := filepath.Join(sockDir, "tpm")
	received := listenRecording(t, socket)
	secret := filepath.Join(dir, "secret")
	writeBytes(t, secret, []byte("the-victims-secret\n"))
	keyFile := filepath.Join(dir, "key.tss2")
	der, err := asn1.Marshal(struct {
		Type      asn1.ObjectIdentifier
		EmptyAuth bool `asn1:"explicit,tag:0"`
		Parent    int64
		Pub, Priv []byte
	}{asn1.ObjectIdentifier{2, 23, 133, 10, 1, 3}, true, 0x40000001, []byte{0, 2, 1, 2}, []byte{0, 2, 3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "TSS2 PRIVATE KEY", Bytes: der}))
	certFile := cp.CertUser.Cert.CertFile

	block := func(env []clientcmdapi.ExecEnvVar, key string) *clientcmdapi.ExecConfig {
		return &clientcmdapi.ExecConfig{APIVersion: execcred.V1, Command: "kplug", Env: env,
			Args:            []string{"proxy-plugin", "--client-cert", certFile, "--client-key", key},
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode, ProvideClusterInfo: true}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteExecKubeconfig(kubeconfig, map[string]*clientcmdapi.ExecConfig{
		"device":     block(nil, "tpm:file="+keyFile+"?device="+socket),
		"pin-source": block([]clientcmdapi.ExecEnvVar{{Name: "KPLUG_TPM_DEVICE", Value: socket}}, "tpm:file="+keyFile+"?pin-source=file:"+secret),
		"device-env": block([]clientcmdapi.ExecEnvVar{{Name: "KPLUG_TPM_DEVICE", Value: socket}}, keyFile),
		// The second review's N1: a wrong PIN from the exec block, sent on every run, locks
		// out every key of the TPM (or token) the user's own environment names.
		"pin-env":        block([]clientcmdapi.ExecEnvVar{{Name: "KPLUG_TPM_PIN", Value: "not-your-pin"}}, keyFile),
		"pkcs11-pin-env": block([]clientcmdapi.ExecEnvVar{{Name: "KPLUG_PKCS11_PIN", Value: "0000"}}, "pkcs11:token=t;object=o"),
	}); err != nil {
		t.Fatal(err)
	}
	kuberc := filepath.Join(dir, "kuberc")
	writeBytes(t, kuberc, []byte("apiVersion: kubectl.config.k8s.io/v1beta1\nkind: Preference\ncredentialPluginPolicy: Allowlist\ncredentialPluginAllowlist:\n- command: kplug\n"))
	kubectl := func(env []string, kctx string) string {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig", kubeconfig, "--context", kctx, "auth", "whoami")
		cmd.Env = append([]string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + dir, "XDG_RUNTIME_DIR=" + filepath.Join(dir, "run")}, env...)
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		if err := cmd.Run(); err == nil {
			t.Errorf("%s: kubectl succeeded with a fake TPM", kctx)
		}
		return errOut.String()
	}
	for _, tc := range []struct {
		context, want string
		env           []string // the client's own environment
		control       bool     // without a policy, the exec block reaches the socket
	}{
		{"device", "a tpm: URI here may not have device= or pin-source=", nil, true},
		{"pin-source", "a tpm: URI here may not have device= or pin-source=", nil, true},
		{"device-env", "$KPLUG_TPM_DEVICE is set by the exec block, not by the client that runs kplug", nil, true},
		{"pin-env", "$KPLUG_TPM_PIN is set by the exec block, not by the client that runs kplug", []string{"KPLUG_TPM_DEVICE=" + socket}, true},
		{"pkcs11-pin-env", "$KPLUG_PKCS11_PIN is set by the exec block, not by the client that runs kplug", nil, false},
	} {
		t.Run(tc.context, func(t *testing.T) {
			errOut := kubectl(append([]string{"KUBERC=" + kuberc}, tc.env...), tc.context)
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("under the policy, stderr lacks %q:\n%s", tc.want, errOut)
			}
			if got := received(); len(got) > 0 {
				t.Errorf("under the policy, the exec block's TPM was sent %d bytes", len(got))
			}
			if !tc.control {
				return
			}
			// Without a policy the exec block is trusted as kubectl trusts it, and the same
			// block reaches its TPM: the policy is what stopped it above.
			kubectl(append([]string{"KUBERC=off"}, tc.env...), tc.context)
			if len(received()) == 0 {
				t.Error("without a policy the exec block's TPM was never reached: the test does not show what the policy stops")
			}
		})
	}
}

// listenRecording listens on a unix socket as a TPM would and records the first command
// each connection sends, then hangs up without an answer; received returns and clears
// what arrived so far.
func listenRecording(t *testing.T, path string) (received func() []byte) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var buf bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				b := make([]byte, 4096)
				n, _ := c.Read(b)
				mu.Lock()
				buf.Write(b[:n])
				mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	return func() []byte {
		mu.Lock()
		defer mu.Unlock()
		b := bytes.Clone(buf.Bytes())
		buf.Reset()
		return b
	}
}
