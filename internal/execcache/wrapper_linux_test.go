package execcache

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/testkit/localuser"
)

// Issue 12 suspicion (confirmed): cache directories were checked for mode but not owner, so a directory another user created first was used.
//
// Another local user creates the exec-cache directory (0700, as a private one looks) and
// plants an answer of their choosing for the victim's plugin; root then runs exec-cache
// with it. The directory is refused before anything is read or written, and, as for any
// unusable cache directory, the plugin is not run: the client gets the error.
func TestSecurityExecCacheRefusesAnotherUsersDirectory(t *testing.T) {
	attacker := localuser.New(t)
	h := newHarness(t)
	info := execInfoEnv(t, execcred.V1, nil, nil)
	// The attacker's answer, under the key of this plugin call (keys do not depend on the
	// directory): taken from an honest run, with the attacker's token in it.
	if _, err := h.call(kubectlA, info); err != nil {
		t.Fatal(err)
	}
	files := h.entryFiles()
	if len(files) != 1 {
		t.Fatalf("%d entries after one run, want 1", len(files))
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var e entry
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatal(err)
	}
	e.Output = []byte(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"attacker-token"}}`)
	e.Clients = nil
	forged, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(attacker.Home, "forged")
	if err := os.WriteFile(src, forged, 0o644); err != nil { // the attacker reads it
		t.Fatal(err)
	}
	dir := filepath.Join(attacker.Home, "exec-cache")
	attacker.Sh(t, fmt.Sprintf("mkdir -m 700 %q && mv %q %q", dir, src, filepath.Join(dir, filepath.Base(files[0]))))

	h.opts.Dir = dir
	out, err := h.call(kubectlB, info)
	want := "exec-cache: cache directory: " + dir + " belongs to uid " + strconv.Itoa(attacker.UID) + ", not to this user (uid 0)"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("exec-cache with %s's directory: %v; want %s...", attacker, err, want)
	}
	if strings.Contains(out, "attacker-token") {
		t.Errorf("the planted answer was served: %q", out)
	}
	if n := h.plugin.Runs(); n != 1 {
		t.Errorf("plugin ran %d times, want 1 (the honest run only)", n)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in %s's directory, want only the planted one", len(entries), attacker)
	}
}
