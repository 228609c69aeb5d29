package verifier

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplug/kplug/internal/noncestore"
	"github.com/kplug/kplug/internal/testkit/localuser"
	"github.com/kplug/kplug/internal/testkit/poll"
)

// TestSecurityResolverSocketSwapped: the directory check and the dial each follow the
// path, so another user who can write a directory above it can swap in their own socket
// in between (issue 31 review, F5). The proxy must then refuse to talk to it: it would
// take keys and users from it.
func TestSecurityResolverSocketSwapped(t *testing.T) {
	f := newResolverFixture(t, noncestore.NewMemory(10, nil), "")
	attacker := localuser.New(t)
	evilDir, err := os.MkdirTemp("", "evil")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(evilDir) })
	if err := os.Chmod(evilDir, 0o777); err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(evilDir, "resolver.sock")
	listener := attacker.Command(t.Context(), attacker.Executable(t, os.Args[0]))
	listener.Env = append(listener.Env, silentListenerEnv+"="+evil)
	if err := listener.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Process.Kill(); _ = listener.Wait() })
	poll.Until(t, "the attacker's socket", func() bool { _, err := os.Stat(evil + ".ready"); return err == nil })
	// The swap: the attacker's socket where the resolver's was, in the proxy's private
	// directory, as if the path had been redirected between check and dial.
	sock := f.auth.resolvers["keys"].cfg.socket
	f.server.Stop()
	if err := os.Rename(evil, sock); err != nil {
		t.Fatal(err)
	}
	auth := New(f.auth.cfg, Options{})
	defer auth.Close()
	err = auth.Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("belongs to uid %d, not to this user", attacker.UID)) {
		t.Errorf("Check through another user's socket = %v", err)
	}
}
