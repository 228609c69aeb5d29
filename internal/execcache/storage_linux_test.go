package execcache

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/oskeyring"
	"github.com/kplug/kplug/internal/testkit/keyringtest"
)

// keyringItems lists the items of h's cache directory in the keyring called name, as
// the keyring itself has them.
func keyringItems(t *testing.T, h *harness, name string) []string {
	t.Helper()
	k, err := oskeyring.Open(t.Context(), name, oskeyring.Config{Service: keyringService, Environ: h.env})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	all, err := k.(oskeyring.Lister).Accounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, a := range all {
		if strings.HasPrefix(a, keyringScope(h.cache)+"/") {
			ours = append(ours, a)
		}
	}
	return ours
}

// keyringHarness is a harness whose answers rest in the keyring called storage: the
// kernel's, or a real Secret Service on a private bus.
func keyringHarness(t *testing.T, storage string) *harness {
	t.Helper()
	h := newHarness(t)
	h.opts.Storage = storage
	if storage != StorageKernelKeyring {
		h.env = keyringtest.StartSecretService(t).Env
	}
	t.Cleanup(func() {
		if _, err := Clear(context.WithoutCancel(t.Context()), h.cache, h.env, "", nil); err != nil {
			t.Errorf("clearing the cache: %v", err)
		}
	})
	return h
}

// With a keyring storage, a warm hit is served from the keyring, no file in the cache
// directory holds the credential, and --list and --clear see and remove the items.
func TestRunKeyringStorage(t *testing.T) {
	for _, tc := range []struct{ storage, keyring string }{
		{StorageKernelKeyring, oskeyring.Kernel},
		{StorageSecretService, oskeyring.SecretService},
		{StorageKeyring, oskeyring.SecretService}, // the bus has a Secret Service
	} {
		t.Run(tc.storage, func(t *testing.T) {
			h := keyringHarness(t, tc.storage)
			info := execInfoEnv(t, execcred.V1, nil, nil)
			steps := []struct {
				name   string
				client Client
				run    int
			}{
				{"miss: the plugin runs", kubectlA, 1},
				{"another client: served from the keyring", kubectlB, 1},
				{"the first client again: a refresh", kubectlA, 2},
				{"a third client: the new answer", kubectlC, 2},
			}
			for _, s := range steps {
				out, err := h.call(s.client, info)
				if want := answer(execcred.V1, "none", s.run, ""); err != nil || out != want || h.plugin.Runs() != s.run {
					t.Fatalf("%s: %q, %v after %d runs\nwant %q after %d\nlog: %s", s.name, out, err, h.plugin.Runs(), want, s.run, h.stderr.String())
				}
			}
			if files := filesHolding(t, h.cache, answer(execcred.V1, "none", 2, "")); len(files) != 0 {
				t.Errorf("credential on disk in %v", files)
			}
			files := h.entryFiles()
			if len(files) != 1 {
				t.Fatalf("entries %v, want 1", files)
			}
			var e entry
			if b, err := os.ReadFile(files[0]); err != nil || json.Unmarshal(b, &e) != nil || e.Keyring == nil || e.Keyring.Name != tc.keyring || len(e.Output) != 0 {
				t.Errorf("entry %+v (%v), want its answer in the %s keyring", e, err, tc.keyring)
			}
			if items := keyringItems(t, h, tc.keyring); len(items) != 1 {
				t.Errorf("%s holds %q, want one item", tc.keyring, items)
			}
			listed, err := List(h.cache, h.now, "")
			if err != nil || len(listed) != 1 || listed[0].Storage != tc.keyring || listed[0].Credential != "token (20 bytes)" || !listed[0].Servable {
				t.Errorf("List = %+v, %v", listed, err)
			}
			n, err := Clear(t.Context(), h.cache, h.env, os.Args[0], []string{"-test.run=^$"})
			if err != nil || n != 1 {
				t.Errorf("Clear = %d, %v; want 1", n, err)
			}
			if items := keyringItems(t, h, tc.keyring); len(items) != 0 {
				t.Errorf("%s still holds %q after --clear", tc.keyring, items)
			}
			if h.stderr.Len() != 0 {
				t.Errorf("log %q, want nothing", h.stderr.String())
			}
		})
	}
}

// Items removed behind exec-cache's back (`keyctl purge`, as the docs tell) make a miss,
// never an error or a wrong answer.
func TestRunKeyringItemsRemovedByHand(t *testing.T) {
	if _, err := exec.LookPath("keyctl"); err != nil {
		keyringtest.Require(t, "this test needs keyctl (keyutils)")
	}
	h := keyringHarness(t, StorageKernelKeyring)
	info := execInfoEnv(t, execcred.V1, nil, nil)
	if _, err := h.call(kubectlA, info); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), "keyctl", "purge", "-p", "user", keyringService+":"+keyringScope(h.cache)+"/").CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "purged 1 keys\n") {
		t.Fatalf("keyctl purge: %q, %v", out, err)
	}
	got, err := h.call(kubectlB, info)
	if want := answer(execcred.V1, "none", 2, ""); err != nil || got != want || h.plugin.Runs() != 2 {
		t.Errorf("after the purge: %q, %v after %d runs; want %q after 2", got, err, h.plugin.Runs(), want)
	}
}

// An answer too big for the keyring is served but not cached: a warning, no entry, no
// item left; the next call runs the plugin again.
func TestRunKeyringOversizeAnswer(t *testing.T) {
	h := keyringHarness(t, StorageKernelKeyring)
	big := make([]byte, 700<<10) // incompressible, over MaxParts items of 16 KiB
	_, _ = rand.Read(big)
	answer := `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"` + base64.RawURLEncoding.EncodeToString(big) + `"}}`
	h.plugin.Stdout(answer)
	info := execInfoEnv(t, execcred.V1, nil, nil)
	for run := 1; run <= 2; run++ {
		out, err := h.call(Client{}, info)
		if err != nil || out != answer || h.plugin.Runs() != run {
			t.Fatalf("call %d: %d bytes, %v after %d runs", run, len(out), err, h.plugin.Runs())
		}
	}
	if want := "exec-cache: not caching the answer: kernel-keyring keyring: storing "; !strings.Contains(h.stderr.String(), want) ||
		!strings.Contains(h.stderr.String(), "too big for the keyring") {
		t.Errorf("log %q, want a warning containing %q and too big", h.stderr.String(), want)
	}
	if files := h.entryFiles(); len(files) != 0 {
		t.Errorf("entries %v, want none", files)
	}
	if items := keyringItems(t, h, oskeyring.Kernel); len(items) != 0 {
		t.Errorf("items %q left, want none", items)
	}
}

// A keyring that cannot be reached makes the call uncached, with one clear warning, and
// at once: the client still gets the plugin's answer.
func TestRunKeyringUnreachable(t *testing.T) {
	h := newHarness(t)
	h.opts.Storage = StorageSecretService
	h.env = []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=" + filepath.Join(t.TempDir(), "no-bus")}
	info := execInfoEnv(t, execcred.V1, nil, nil)
	for run := 1; run <= 2; run++ {
		out, err := h.call(Client{}, info)
		if want := answer(execcred.V1, "none", run, ""); err != nil || out != want || h.plugin.Runs() != run {
			t.Fatalf("call %d: %q, %v after %d runs", run, out, err, h.plugin.Runs())
		}
	}
	want := "exec-cache: not caching the answer: secret-service keyring: connecting to the session bus unix:path=" + h.env[0][len("DBUS_SESSION_BUS_ADDRESS=unix:path="):] +
		": dial unix " + h.env[0][len("DBUS_SESSION_BUS_ADDRESS=unix:path="):] + ": connect: no such file or directory; run in a desktop session, or use --storage kernel-keyring or file"
	if got := h.stderr.String(); strings.Count(got, want) != 2 {
		t.Errorf("log %q, want the warning %q twice", got, want)
	}
	if files := h.entryFiles(); len(files) != 0 {
		t.Errorf("entries %v, want none", files)
	}
}

// Switching the storage moves answers: a file entry is not served from the keyring
// storage (and its file with the credential goes), a keyring entry not from the file
// storage (and its items go).
func TestRunStorageSwitch(t *testing.T) {
	h := keyringHarness(t, StorageFile)
	info := execInfoEnv(t, execcred.V1, nil, nil)
	steps := []struct {
		storage string
		run     int
		onDisk  bool
		items   int
	}{
		{StorageFile, 1, true, 0},
		{StorageKernelKeyring, 2, false, 1},
		{StorageSecretService, 3, false, 0}, // by name: the kernel keyring's answer is not taken
		{StorageKeyring, 3, false, 0},       // any keyring: the Secret Service's answer is served
		{StorageFile, 4, true, 0},
	}
	for _, s := range steps {
		h.opts.Storage = s.storage
		out, err := h.call(Client{}, info)
		if want := answer(execcred.V1, "none", s.run, ""); err != nil || out != want || h.plugin.Runs() != s.run {
			t.Fatalf("--storage %s: %q, %v after %d runs; want %q after %d\nlog: %s", s.storage, out, err, h.plugin.Runs(), want, s.run, h.stderr.String())
		}
		if files := filesHolding(t, h.cache, answer(execcred.V1, "none", s.run, "")); (len(files) != 0) != s.onDisk {
			t.Errorf("--storage %s: files holding the credential: %v", s.storage, files)
		}
		if items := keyringItems(t, h, oskeyring.Kernel); len(items) != s.items {
			t.Errorf("--storage %s: kernel keyring items %q, want %d", s.storage, items, s.items)
		}
	}
	if items := keyringItems(t, h, oskeyring.SecretService); len(items) != 0 {
		t.Errorf("Secret Service items %q left after switching back to file", items)
	}
}

// --storage none runs the plugin every time and creates no cache directory.
func TestRunStorageNone(t *testing.T) {
	h := newHarness(t)
	h.opts.Storage = StorageNone
	info := execInfoEnv(t, execcred.V1, nil, nil)
	for run := 1; run <= 2; run++ {
		out, err := h.call(kubectlA, info)
		if want := answer(execcred.V1, "none", run, ""); err != nil || out != want || h.plugin.Runs() != run {
			t.Fatalf("call %d: %q, %v after %d runs", run, out, err, h.plugin.Runs())
		}
	}
	if _, err := os.Stat(h.cache); !os.IsNotExist(err) {
		t.Errorf("cache directory: %v, want none", err)
	}
}

// A caller waiting for a login done in a terminal is served it from the keyring.
func TestWaitForLoginKeyring(t *testing.T) {
	testWaitForLogin(t, keyringHarness(t, StorageKernelKeyring))
}

// TestRunKeyringKeepsKeyMaterialOut: with a keyring storage too, signing material
// (status.httpSignature) is passed on and stored nowhere: no item, no entry.
func TestRunKeyringKeepsKeyMaterialOut(t *testing.T) {
	signing, key := signingAnswer(t)
	for _, tc := range []struct{ storage, keyring string }{
		{StorageKernelKeyring, oskeyring.Kernel},
		{StorageSecretService, oskeyring.SecretService},
	} {
		t.Run(tc.storage, func(t *testing.T) {
			h := keyringHarness(t, tc.storage)
			h.plugin.Stdout(signing)
			for i, client := range []Client{kubectlA, kubectlB} {
				if out, err := h.call(client, execInfoEnv(t, execcred.V1, nil, nil)); err != nil || out != signing {
					t.Fatalf("call %d: %q, %v", i, out, err)
				}
			}
			if items := keyringItems(t, h, tc.keyring); len(items) != 0 || h.plugin.Runs() != 2 {
				t.Errorf("%s holds %q after %d runs, want nothing after 2", tc.keyring, items, h.plugin.Runs())
			}
			if files := append(filesHolding(t, h.cache, key), filesHolding(t, h.cache, signing)...); len(files) != 0 || len(h.entryFiles()) != 0 {
				t.Errorf("the private key is on disk in %v; entries %v", files, h.entryFiles())
			}
		})
	}
}
