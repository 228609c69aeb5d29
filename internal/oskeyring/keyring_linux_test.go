package oskeyring

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/kplug/kplug/internal/testkit/keyringtest"
	"github.com/kplug/kplug/internal/testkit/localuser"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// helperEnv makes the test binary a helper that does one keyring operation and prints
// its result: how a test acts as a second local user.
const helperEnv = "KPLUG_OSKEYRING_HELPER"

func TestMain(m *testing.M) {
	if op := os.Getenv(helperEnv); op != "" {
		os.Exit(helperMain(op, os.Getenv(helperEnv+"_ARG")))
	}
	goleak.VerifyTestMain(m)
}

// helperMain does op in the kernel keyring, as whoever runs it, and prints the outcome.
func helperMain(op, arg string) int {
	ctx := context.Background() //nolint:forbidigo // a helper process: no test here
	k, err := Open(ctx, Kernel, Config{Service: "kplug-test"})
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	switch op {
	case "read-serial": // read a key by its serial number, as an attacker who learnt it would
		id, _ := strconv.Atoi(arg)
		buf := make([]byte, 4096)
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0)
		if err != nil {
			fmt.Println("error:", err)
			return 0
		}
		fmt.Printf("read: %q\n", buf[:min(n, len(buf))])
	case "get":
		b, err := k.Get(ctx, arg)
		fmt.Printf("get: %q %v\n", b, err)
	case "put": // store arg random bytes, then list what is left of them
		size, _ := strconv.Atoi(arg)
		_, err := Put(ctx, k, "big", "", randomBytes(size), time.Minute)
		accounts, lerr := k.(Lister).Accounts(ctx)
		fmt.Printf("put: %v\nleft: %q %v\n", err, accounts, lerr)
	case "clear":
		// A UID's user keyring outlives its processes (and userdel): a later test user
		// with the same UID would find the keys.
		n, err := RemoveAll(ctx, k, "")
		fmt.Println("removed", n, err)
	case "set": // store arg under "mine" and print the key's serial
		if err := k.Set(ctx, Item{Account: "mine", Secret: []byte(arg)}); err != nil {
			fmt.Println("set:", err)
			return 1
		}
		id, err := k.(*kernel).find("mine")
		fmt.Println(id, err)
	}
	return 0
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// service returns a service name of t's own, so tests sharing the user keyring (or a
// bus) see only their own items; they are removed when t ends.
func service(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "kplug-test-" + hex.EncodeToString(b)
}

func removeAllAtEnd(t *testing.T, k Keyring) {
	t.Cleanup(func() {
		if _, err := RemoveAll(context.WithoutCancel(t.Context()), k, ""); err != nil {
			t.Errorf("cleaning up: %v", err)
		}
	})
}

// roundTrip stores, reads, lists and deletes blobs of several sizes in k.
func roundTrip(t *testing.T, k Keyring) {
	t.Helper()
	ctx := t.Context()
	for _, size := range []int{10, 3000, 100 << 10} {
		data := randomBytes(size)
		account := "scope/" + strconv.Itoa(size)
		ref, err := Put(ctx, k, account, "kplug test", data, time.Hour)
		if err != nil {
			t.Fatalf("Put %d bytes: %v", size, err)
		}
		got, err := Fetch(ctx, k, account, ref)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Fetch %d bytes: %d bytes, %v", size, len(got), err)
		}
		accounts, err := k.(Lister).Accounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ref.Parts {
			if !slices.Contains(accounts, partName(account, i)) {
				t.Errorf("Accounts = %q, missing %s", accounts, partName(account, i))
			}
		}
		if err := Remove(ctx, k, account, ref.Parts); err != nil {
			t.Fatal(err)
		}
		if _, err := Fetch(ctx, k, account, ref); !errors.Is(err, ErrNotFound) {
			t.Errorf("Fetch after Remove: %v, want ErrNotFound", err)
		}
		if _, err := k.Get(ctx, partName(account, 0)); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get after Remove: %v, want ErrNotFound", err)
		}
	}
	if err := k.Delete(ctx, "never-stored"); err != nil {
		t.Errorf("Delete of a missing item: %v, want nil", err)
	}
}

func TestKernelRoundTrip(t *testing.T) {
	k, err := Open(t.Context(), Kernel, Config{Service: service(t)})
	if err != nil {
		t.Fatal(err)
	}
	removeAllAtEnd(t, k)
	roundTrip(t, k)
}

// The keys are the user's: readable by any process of the user, whether or not it has
// the user keyring in its session, and by nobody else.
func TestKernelKeyPermissionsAndTimeout(t *testing.T) {
	ctx := t.Context()
	k, err := Open(ctx, Kernel, Config{Service: service(t)})
	if err != nil {
		t.Fatal(err)
	}
	removeAllAtEnd(t, k)
	if err := k.Set(ctx, Item{Account: "a", Secret: []byte("s"), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	id, err := k.(*kernel).find("a")
	if err != nil {
		t.Fatal(err)
	}
	d, err := unix.KeyctlString(unix.KEYCTL_DESCRIBE, id)
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Split(d, ";"); len(f) < 5 || f[3] != "3f3f0000" {
		t.Errorf("key %d described as %q, want permissions 3f3f0000 (possessor and user all, others none)", id, d)
	}
	// /proc/keys shows the expiry of each key the reader may view: "1h" or "59m".
	keys, err := os.ReadFile("/proc/keys")
	if err != nil {
		t.Skip("no /proc/keys to check the timeout:", err)
	}
	for _, line := range strings.Split(string(keys), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[0] == fmt.Sprintf("%08x", id) {
			if f[3] != "59m" && f[3] != "1h" {
				t.Errorf("key expires in %q, want about 1h: %s", f[3], line)
			}
			return
		}
	}
	t.Errorf("key %d not in /proc/keys", id)
}

// Security: another local user can neither find nor read the user's keys, even knowing
// their serial numbers, and the user cannot read theirs; each user's own keys work.
func TestSecurityKernelKeysAreThePerUsers(t *testing.T) {
	other := localuser.New(t)
	ctx := t.Context()
	k, err := Open(ctx, Kernel, Config{Service: "kplug-test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Set(ctx, Item{Account: "secret-of-root", Secret: []byte("root-token")}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.WithoutCancel(ctx), "secret-of-root") })
	id, err := k.(*kernel).find("secret-of-root")
	if err != nil {
		t.Fatal(err)
	}
	bin := other.Executable(t, os.Args[0])
	run := func(op, arg string) string {
		t.Helper()
		cmd := other.Command(ctx, bin, "-test.run=^$")
		cmd.Env = append(cmd.Env, helperEnv+"="+op, helperEnv+"_ARG="+arg)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper %s as %s: %v: %s", op, other, err, out)
		}
		return string(out)
	}
	run("clear", "") // what a user with this UID before left
	if out := run("read-serial", strconv.Itoa(id)); !strings.Contains(out, "permission denied") || strings.Contains(out, "root-token") {
		t.Errorf("%s reading root's key %d: %q, want permission denied", other, id, out)
	}
	if out := run("get", "secret-of-root"); !strings.Contains(out, ErrNotFound.Error()) {
		t.Errorf("%s looking up root's item: %q, want not found", other, out)
	}
	// The other user's own item, which root (without possessing it) cannot read either.
	var theirs int
	if _, err := fmt.Sscan(run("set", "their-token"), &theirs); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, theirs, buf, 0); !errors.Is(err, unix.EACCES) {
		t.Errorf("root reading %s's key %d: %q, %v; want permission denied", other, theirs, buf[:max(n, 0)], err)
	}
	if out := run("get", "mine"); !strings.Contains(out, `"their-token"`) {
		t.Errorf("%s reading its own item: %q", other, out)
	}
	if out := run("clear", ""); out != "removed 1 <nil>\n" {
		t.Errorf("removing %s's items: %q", other, out)
	}
}

// A non-root user's keys are bounded by /proc/sys/kernel/keys/maxbytes (20000 by
// default): a blob beyond it fails with ErrTooBig and leaves no item behind.
func TestKernelQuotaAsUser(t *testing.T) {
	other := localuser.New(t)
	maxBytes, err := os.ReadFile("/proc/sys/kernel/keys/maxbytes")
	if err != nil {
		t.Skip(err)
	}
	quota, _ := strconv.Atoi(strings.TrimSpace(string(maxBytes)))
	bin := other.Executable(t, os.Args[0])
	run := func(op string, size int) string {
		cmd := other.Command(t.Context(), bin, "-test.run=^$")
		cmd.Env = append(cmd.Env, helperEnv+"="+op, helperEnv+"_ARG="+strconv.Itoa(size))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper: %v: %s", err, out)
		}
		return string(out)
	}
	put := func(size int) string { return run("put", size) }
	run("clear", 0)
	defer run("clear", 0)
	if out := put(quota + 1000); !strings.Contains(out, "put: "+Kernel+" keyring: storing big/1: too big for the keyring: the user's kernel key quota is used up") ||
		!strings.Contains(out, "left: [] <nil>") {
		t.Errorf("storing %d bytes with a quota of %d:\n%s\nwant the quota error and no item left", quota+1000, quota, out)
	}
	// The kernel gives back the quota of the removed parts from its garbage collector, a
	// work item that a busy machine runs some time later: until then a store may find the
	// quota used up.
	var out string
	poll.Until(t, "the quota of the removed parts to come back", func() bool {
		out = put(quota / 4)
		return !strings.Contains(out, "quota is used up")
	})
	if !strings.Contains(out, "put: <nil>") {
		t.Errorf("storing %d bytes with a quota of %d:\n%s\nwant success", quota/4, quota, out)
	}
}

func TestSecretServiceRoundTrip(t *testing.T) {
	ss := keyringtest.StartSecretService(t)
	svc := service(t)
	k, err := Open(t.Context(), SecretService, Config{Service: svc, Environ: ss.Env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	roundTrip(t, k)

	// What a user inspecting the keyring with libsecret's secret-tool sees.
	if _, err := exec.LookPath("secret-tool"); err != nil {
		keyringtest.Require(t, "the Secret Service tests need secret-tool (libsecret-tools)")
	}
	if err := k.Set(t.Context(), Item{Account: "x/0", Label: "kplug test", Secret: []byte("value")}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "secret-tool", "lookup", "service", svc, "account", "x/0")
	cmd.Env = append(os.Environ(), ss.Env...)
	out, err := cmd.Output()
	if err != nil || string(out) != "value" {
		t.Errorf("secret-tool lookup = %q, %v; want value", out, err)
	}
	cmd = exec.CommandContext(t.Context(), "secret-tool", "clear", "service", svc)
	cmd.Env = append(os.Environ(), ss.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("secret-tool clear: %v: %s", err, out)
	}
	if _, err := k.Get(t.Context(), "x/0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after secret-tool clear: %v, want ErrNotFound", err)
	}
}

// Auto takes the Secret Service when the session bus has one, and the kernel keyring
// when there is no bus or no Secret Service on it.
func TestAutoChoice(t *testing.T) {
	ss := keyringtest.StartSecretService(t)
	noSS := keyringtest.StartBus(t, t.TempDir())
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"bus with a Secret Service", ss.Env, SecretService},
		{"bus without one", []string{"DBUS_SESSION_BUS_ADDRESS=" + noSS}, Kernel},
		{"no bus", []string{"XDG_RUNTIME_DIR=" + empty}, Kernel},
		{"bus address that does not answer", []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=" + filepath.Join(empty, "nothing")}, Kernel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := Open(t.Context(), Auto, Config{Service: "kplug-test", Environ: tc.env})
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			if k.Name() != tc.want {
				t.Errorf("Auto chose %s, want %s", k.Name(), tc.want)
			}
		})
	}
}

// Regression: a Secret Service asked for where none can be reached is one clear error,
// returned within the timeout, never a hang on a bus that accepts and says nothing.
func TestSecretServiceUnreachable(t *testing.T) {
	dir := t.TempDir()
	// A socket that accepts connections and never answers, like a wedged bus.
	silent, err := net.Listen("unix", filepath.Join(dir, "silent"))
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	noSS := keyringtest.StartBus(t, t.TempDir())
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"no bus", []string{"XDG_RUNTIME_DIR=" + dir},
			"secret-service keyring: finding the session bus: DBUS_SESSION_BUS_ADDRESS is not set and there is no " + filepath.Join(dir, "bus") +
				"; run in a desktop session, or use --storage kernel-keyring or file"},
		{"bus that says nothing", []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=" + filepath.Join(dir, "silent")},
			"secret-service keyring: connecting to the session bus unix:path=" + filepath.Join(dir, "silent") +
				": the bus did not complete the handshake within 300ms; run in a desktop session, or use --storage kernel-keyring or file"},
		{"bus without a Secret Service", []string{"DBUS_SESSION_BUS_ADDRESS=" + noSS},
			"secret-service keyring: finding the Secret Service: no org.freedesktop.secrets on the session bus (no Secret Service is running, e.g. gnome-keyring-daemon)" +
				"; run in a desktop session, or use --storage kernel-keyring or file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := Open(t.Context(), SecretService, Config{Service: "kplug-test", Environ: tc.env, Timeout: 300 * time.Millisecond})
			if err == nil {
				k.Close()
				t.Fatal("Open succeeded")
			}
			if err.Error() != tc.want {
				t.Errorf("Open:\n got %v\nwant %s", err, tc.want)
			}
		})
	}
	silent.Close()
	for c := range accepted {
		c.Close()
	}
}

// The sizes of typical answers, and how many items each keyring needs for them: a token
// answer fits one item everywhere; a client certificate and key answer (RSA 2048, the
// usual kubeadm client) fits one item in Credential Manager's 2560 bytes once compressed.
func TestEntrySizes(t *testing.T) {
	// aws-iam-authenticator's token is about 1100 characters of base64; random ones
	// compress least.
	token := `{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","spec":{},"status":{"expirationTimestamp":"2026-11-22T12:14:00Z","token":"k8s-aws-v1.` +
		base64.RawURLEncoding.EncodeToString(randomBytes(820)) + `"}}`
	ca := testpki.NewTestCA(t, "ca")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	certFile, err := ca.IssueFor("client", &x509.Certificate{Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, key.Public(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certAnswer, err := json.Marshal(map[string]any{"kind": "ExecCredential", "apiVersion": "client.authentication.k8s.io/v1",
		"status": map[string]string{"clientCertificateData": string(certPEM), "clientKeyData": string(testpki.PEM("PRIVATE KEY", keyDER))}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		answer []byte
	}{{"token", []byte(token)}, {"client certificate and key", certAnswer}} {
		for _, limit := range []int{keychainItemLimit, credentialManagerItemLimit, kernelItemLimit, ssItemLimit} {
			k := newMem(limit)
			ref, err := Put(t.Context(), k, "a", "", tc.answer, 0)
			if err != nil {
				t.Fatal(err)
			}
			stored := 0
			for _, v := range k.items {
				stored += len(v)
			}
			t.Logf("%s answer: %d bytes; stored as %d bytes in %d item(s) of at most %d", tc.name, len(tc.answer), stored, ref.Parts, limit)
			if ref.Parts != 1 {
				t.Errorf("%s answer of %d bytes took %d items of %d bytes, want 1", tc.name, len(tc.answer), ref.Parts, limit)
			}
		}
	}
}
