package execcache

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

// wrapperEnv makes the test binary the wrapper itself, as a process of its own, for the
// tests across processes; it names the cache directory. Otherwise, re-executed, it is the
// wrapped plugin: the fake of internal/exectest.
const wrapperEnv = "KPLUG_EXECCACHE_TEST_WRAPPER"

// programEnv makes the test binary the kplug-exec-cache program itself (Main, as
// cmd/kplug-exec-cache runs it: flags, the run, exit codes), with its arguments.
const programEnv = "KPLUG_EXECCACHE_TEST_PROGRAM"

func TestMain(m *testing.M) {
	if dir := os.Getenv(wrapperEnv); dir != "" {
		os.Exit(wrapperMain(dir))
	}
	if os.Getenv(programEnv) != "" {
		os.Exit(programMain())
	}
	exectest.Main(nil)
	goleak.VerifyTestMain(m)
}

// answerTemplate is what the fake plugin answers: a token naming the cluster it was sent,
// its run number and whether its stdin is a terminal, with expiry (RFC 3339) if set. Odd
// spacing, to check that the answer is passed on byte for byte; see answer.
func answerTemplate(expiry string) string {
	exp := ""
	if expiry != "" {
		exp = fmt.Sprintf(`,"expirationTimestamp":%q`, expiry)
	}
	return `{{$v := ""}}{{$s := "none"}}{{with .Info}}{{$v = .apiVersion}}{{with .spec}}{{with .cluster}}{{$s = .server}}{{end}}{{end}}{{end}}` +
		`{ "apiVersion": {{printf "%q" $v}},"kind":"ExecCredential",  "status":{"token":"tok-{{$s}}-{{.Run}}-tty={{.TTY}}"` + exp + "}}\n\n"
}

// fakePlugin makes the wrapped plugin, answering with answerTemplate.
func fakePlugin(t testing.TB) *exectest.Plugin {
	t.Helper()
	return exectest.New(t).Stdout(answerTemplate(""))
}

// wrapperMain runs the wrapper around the fake plugin named in its environment, as its
// own process, and prints the answer.
func wrapperMain(cache string) int {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, wrapperEnv+"=") { // the plugin is the plugin, not a wrapper
			env = append(env, kv)
		}
	}
	err := Run(context.Background(), Options{ //nolint:forbidigo // a helper process: no test here
		Command:    os.Args[0],
		Args:       []string{"-test.run=^$"},
		Dir:        cache,
		DefaultTTL: time.Hour,
		Environ:    env,
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		Client:     ClientOf(os.Getppid()),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// programMain is cmd/kplug-exec-cache's main, but for the environment it passes on: the
// wrapped plugin (the test binary again) must be the plugin, not the program.
func programMain() int {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, programEnv+"=") {
			env = append(env, kv)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM) //nolint:forbidigo // a helper process: no test here
	defer stop()
	return Main(ctx, "kplug-exec-cache", os.Args[1:], Process{
		Environ: env, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Client: ClientOf(os.Getppid()),
	})
}

// execInfoEnv returns the KUBERNETES_EXEC_INFO entry a client would set.
func execInfoEnv(t testing.TB, apiVersion string, cluster *wire.Cluster, response *wire.Response) string {
	t.Helper()
	b, err := (&wire.Info{APIVersion: apiVersion, Cluster: cluster, Response: response}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	return wire.InfoEnv + "=" + string(b)
}

// knownPlugin returns a path to the fake plugin (the test binary) under the base name of a
// plugin exec-cache knows, so that its identity rule applies.
func knownPlugin(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(os.Args[0], path); err != nil {
		t.Fatal(err)
	}
	return path
}

// harness runs the wrapper in process around a fake plugin, with a settable clock.
type harness struct {
	t      *testing.T
	plugin *exectest.Plugin
	cache  string
	now    time.Time
	opts   Options
	env    []string // more of the wrapper's environment
	stderr bytes.Buffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, plugin: fakePlugin(t), cache: filepath.Join(t.TempDir(), "cache"),
		now: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	h.opts = Options{Command: os.Args[0], Args: []string{"-test.run=^$"}, Dir: h.cache, DefaultTTL: time.Hour,
		Log: slog.New(slog.NewTextHandler(&h.stderr, nil))}
	return h
}

// call runs the wrapper as client with KUBERNETES_EXEC_INFO info (empty: unset).
func (h *harness) call(client Client, info string) (string, error) {
	h.t.Helper()
	var out bytes.Buffer
	o := h.opts
	o.Environ = append(h.plugin.Env(), h.env...)
	if info != "" {
		o.Environ = append(o.Environ, info)
	}
	o.Stdout, o.Stderr, o.Client = &out, &h.stderr, client
	o.Now = func() time.Time { return h.now }
	err := Run(h.t.Context(), o)
	return out.String(), err
}

// answer is what the fake plugin prints for run n against server.
func answer(apiVersion, server string, n int, expiry string) string {
	exp := ""
	if expiry != "" {
		exp = fmt.Sprintf(`,"expirationTimestamp":%q`, expiry)
	}
	return fmt.Sprintf("{ \"apiVersion\": %q,\"kind\":\"ExecCredential\",  \"status\":{\"token\":\"tok-%s-%d-tty=false\"%s}}\n\n", apiVersion, server, n, exp)
}

func (h *harness) entryFiles() []string {
	h.t.Helper()
	files, err := filepath.Glob(filepath.Join(h.cache, "*.json"))
	if err != nil {
		h.t.Fatal(err)
	}
	return files
}

// filesHolding returns the files under dir, if it exists, that hold answer, as it is or
// as base64 (how an entry file holds it).
func filesHolding(t *testing.T, dir, answer string) []string {
	t.Helper()
	var found []string
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	encoded := base64.StdEncoding.EncodeToString([]byte(answer))
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && (strings.Contains(string(b), answer) || strings.Contains(string(b), encoded)) {
			found = append(found, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
