//go:build unix

package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplug/kplug/httpsig/resolverapi"
	"github.com/kplug/kplug/internal/testkit/poll"
)

// TestSignatureResolverCommand serves a key file on a socket it creates 0600 in a private
// directory, answers over the resolver protocol, and removes the socket when stopped.
func TestSignatureResolverCommand(t *testing.T) {
	t.Setenv("KUBERNETES_EXEC_INFO", "")
	dir, err := os.MkdirTemp("", "kr") // short: a socket path is limited to about 100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	keys := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keys, []byte("kind: SignatureResolverKeys\nkeys:\n- {keyID: corp/ci, algorithm: hmac-sha256, secretBase64: cw==, user: {username: ci}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "run", "r.sock")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- Run(ctx, []string{"signature-resolver", "--keys", keys, "--socket", sock}, IO{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &errOut})
	}()
	poll.Until(t, "the resolver's socket", func() bool { _, err := os.Stat(sock); return err == nil })
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, %v; want 0600", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket directory mode %v, %v; want 0700", fi.Mode(), err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	k, err := resolverapi.NewClient(conn).ResolveKey(t.Context(), &resolverapi.ResolveKeyRequest{KeyId: "corp/ci"})
	if err != nil || k.GetUser().GetUsername() != "ci" {
		t.Errorf("ResolveKey = %v, %v", k, err)
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Errorf("exit %d: %s", code, errOut.String())
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Error("the socket is left behind")
	}
}

func TestSignatureResolverUsage(t *testing.T) {
	t.Setenv("KUBERNETES_EXEC_INFO", "")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: Other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(open, 0o777)
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("kind: SignatureResolverKeys\nkeys: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--socket", "s"}, "--keys is required"},
		{[]string{"--keys", bad, "--socket", filepath.Join(dir, "s")}, `kind "Other": want SignatureResolverKeys`},
		{[]string{"--keys", good, "--socket", filepath.Join(dir, "s"), "--nonce-store", "redis"}, `--nonce-store "redis": want memory, etcd or none`},
		{[]string{"--keys", good, "--socket", filepath.Join(dir, "s"), "--nonce-store", "etcd"}, "--nonce-store etcd needs --etcd-endpoints"},
		{[]string{"--keys", good, "--socket", filepath.Join(open, "s")}, "--socket " + filepath.Join(open, "s")},
	} {
		code, _, errOut := run(t, append([]string{"signature-resolver"}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
