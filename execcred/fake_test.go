package execcred

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/kplug/kplug/execplugin"
)

// fake is one fake plugin with its own files, so tests using it can run in parallel.
type fake struct {
	t   *testing.T
	dir string
	env []string
}

func newFake(t *testing.T) *fake {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "info"), 0o700); err != nil {
		t.Fatal(err)
	}
	f := &fake{t: t, dir: dir, env: []string{
		helperEnv + "=1",
		"FAKE_INFO_DIR=" + filepath.Join(dir, "info"),
		"FAKE_COUNT_FILE=" + filepath.Join(dir, "count"),
		"FAKE_OUTPUT_FILE=" + filepath.Join(dir, "out"),
	}}
	f.output("")
	return f
}

// output sets what the plugin prints from now on.
func (f *fake) output(s string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "out"), []byte(s), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// exit sets the plugin's exit code from now on.
func (f *fake) exit(code int) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "exit"), []byte(fmt.Sprint(code)), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fake) token(apiVersion, token string, expiry time.Time) {
	exp := ""
	if !expiry.IsZero() {
		exp = fmt.Sprintf(`"expirationTimestamp":%q,`, expiry.UTC().Format(time.RFC3339))
	}
	f.output(fmt.Sprintf(`{"kind":"ExecCredential","apiVersion":%q,"status":{%s"token":%q}}`, apiVersion, exp, token))
}

func (f *fake) config(apiVersion string, env ...string) Config {
	return Config{
		Command:         os.Args[0],
		Env:             append(append([]string{}, f.env...), env...),
		APIVersion:      apiVersion,
		InteractiveMode: Never,
	}
}

// runs counts the plugin's runs so far.
func (f *fake) runs() int {
	info, err := os.Stat(filepath.Join(f.dir, "count"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return int(info.Size())
}

// infos returns KUBERNETES_EXEC_INFO of every run, in order.
func (f *fake) infos() []string {
	entries, err := os.ReadDir(filepath.Join(f.dir, "info"))
	if err != nil {
		f.t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(f.dir, "info", n))
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

// quietHost hides plugin stderr and says stdin is not a terminal.
func quietHost() Host {
	return Host{Runner: &execplugin.Runner{Stderr: io.Discard}, IsTerminal: func(*os.File) bool { return false }}
}

// clock is a fake clock for expiry tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
