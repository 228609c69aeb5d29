package execcache

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/term"

	"github.com/kplug/kplug/execcred"
)

// The test binary is also the wrapped plugin (pluginEnv names its directory) and, for the
// tests across processes, the wrapper itself (wrapperEnv names the cache directory).
const (
	pluginEnv  = "KPLUG_EXECCACHE_TEST_PLUGIN"
	wrapperEnv = "KPLUG_EXECCACHE_TEST_WRAPPER"
	// A test binary built with -race sleeps 1 s on exit unless told not to.
	noRaceExitSleep = "GORACE=atexit_sleep_ms=0"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(wrapperEnv); dir != "" {
		os.Exit(wrapperMain(dir))
	}
	if dir := os.Getenv(pluginEnv); dir != "" {
		os.Exit(pluginMain(dir))
	}
	goleak.VerifyTestMain(m)
}

// pluginMain is the fake plugin. It counts its runs in <dir>/runs, and answers with a
// token naming the cluster it was sent and its run number, or with <dir>/stdout
// verbatim. <dir>/expiry holds an expirationTimestamp, <dir>/exit an exit code,
// <dir>/stderr what to write to stderr, <dir>/sleep a duration.
func pluginMain(dir string) int {
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	f, err := os.OpenFile(filepath.Join(dir, "runs"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, _ = f.WriteString("x")
	_ = f.Close()
	run := len(read("runs"))
	if d, err := time.ParseDuration(read("sleep")); err == nil {
		time.Sleep(d)
	}
	fmt.Fprint(os.Stderr, read("stderr"))
	if out := read("stdout"); out != "" {
		fmt.Print(out)
	} else {
		var in struct {
			APIVersion string `json:"apiVersion"`
			Spec       struct {
				Cluster *execcred.Cluster `json:"cluster"`
			} `json:"spec"`
		}
		_ = json.Unmarshal([]byte(os.Getenv(execcred.InfoEnv)), &in)
		server := "none"
		if in.Spec.Cluster != nil {
			server = in.Spec.Cluster.Server
		}
		token := fmt.Sprintf("tok-%s-%d-tty=%v", server, run, term.IsTerminal(int(os.Stdin.Fd())))
		expiry := ""
		if e := read("expiry"); e != "" {
			expiry = fmt.Sprintf(`,"expirationTimestamp":%q`, e)
		}
		// Odd spacing, to check that the answer is passed on byte for byte.
		fmt.Printf("{ \"apiVersion\": %q,\"kind\":\"ExecCredential\",  \"status\":{\"token\":%q%s}}\n\n", in.APIVersion, token, expiry)
	}
	code, _ := strconv.Atoi(strings.TrimSpace(read("exit")))
	return code
}

// wrapperMain runs the wrapper around the fake plugin ($KPLUG_EXECCACHE_TEST_PLUGIN), as
// its own process, and prints the answer.
func wrapperMain(cache string) int {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, wrapperEnv+"=") { // the plugin is the plugin, not a wrapper
			env = append(env, kv)
		}
	}
	err := Run(context.Background(), Options{
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

// fakePlugin is one fake plugin directory.
type fakePlugin struct {
	t   *testing.T
	dir string
}

func newFakePlugin(t *testing.T) *fakePlugin {
	t.Helper()
	return &fakePlugin{t: t, dir: t.TempDir()}
}

func (p *fakePlugin) set(name, value string) {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if value == "" {
		_ = os.Remove(path)
		return
	}
	if err := os.WriteFile(path, []byte(value), 0o600); err != nil {
		p.t.Fatal(err)
	}
}

func (p *fakePlugin) runs() int {
	b, _ := os.ReadFile(filepath.Join(p.dir, "runs"))
	return len(b)
}

// execInfoEnv returns the KUBERNETES_EXEC_INFO entry a client would set.
func execInfoEnv(t *testing.T, apiVersion string, cluster *execcred.Cluster, response *execcred.Response) string {
	t.Helper()
	b, err := execcred.ExecInfo(apiVersion, false, cluster, response)
	if err != nil {
		t.Fatal(err)
	}
	return execcred.InfoEnv + "=" + string(b)
}

// harness runs the wrapper in process around a fake plugin, with a settable clock.
type harness struct {
	t      *testing.T
	plugin *fakePlugin
	cache  string
	now    time.Time
	opts   Options
	env    []string // more of the wrapper's environment
	stderr bytes.Buffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, plugin: newFakePlugin(t), cache: filepath.Join(t.TempDir(), "cache"),
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
	o.Environ = append([]string{pluginEnv + "=" + h.plugin.dir, noRaceExitSleep}, h.env...)
	if info != "" {
		o.Environ = append(o.Environ, info)
	}
	o.Stdout, o.Stderr, o.Client = &out, &h.stderr, client
	o.Now = func() time.Time { return h.now }
	err := Run(context.Background(), o)
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
