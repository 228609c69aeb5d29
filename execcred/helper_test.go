package execcred

import (
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// The test binary, re-executed, is the fake plugin of these tests (internal/testkit/exectest).
// Its behaviour "sdk-status" is a plugin written with execcred/plugin that explains its
// failure (sdkStatusPlugin).
func TestMain(m *testing.M) {
	exectest.Main(map[string]func() int{"sdk-status": sdkStatusPlugin})
	goleak.VerifyTestMain(m)
}

// tokenOutput is an ExecCredential with token and, if not zero, expiry.
func tokenOutput(apiVersion, token string, expiry time.Time) string {
	exp := ""
	if !expiry.IsZero() {
		exp = fmt.Sprintf(`"expirationTimestamp":%q,`, expiry.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf(`{"kind":"ExecCredential","apiVersion":%q,"status":{%s"token":%q}}`, apiVersion, exp, token)
}

// fakeConfig configures p as a non-interactive plugin of apiVersion.
func fakeConfig(p *exectest.Plugin, apiVersion string) Config {
	return Config{Command: p.Path(), Env: p.Env(), APIVersion: apiVersion, InteractiveMode: Never}
}

// infos returns KUBERNETES_EXEC_INFO of every run of p, in order.
func infos(p *exectest.Plugin) []string {
	var out []string
	for _, c := range p.Calls() {
		out = append(out, c.Info)
	}
	return out
}

// quietHost hides plugin stderr and says stdin is not a terminal.
func quietHost() PluginOptions {
	return PluginOptions{Runner: &execplugin.Runner{Stderr: io.Discard}, IsTerminal: func(*os.File) bool { return false }}
}

// newSource composes New's pipeline for cfg, with a quiet host unless opts has one.
func newSource(t testing.TB, cfg Config, opts Options) Source {
	t.Helper()
	if opts.Plugin.Runner == nil {
		opts.Plugin = quietHost()
	}
	src, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func mustCred(t *testing.T, src Source) *Credential {
	t.Helper()
	c, err := src.Credential(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustToken(t *testing.T, src Source) string {
	t.Helper()
	return mustCred(t, src).Token
}

// clientCert returns a client certificate and its key, PEM, issued by a test CA.
func clientCert(t testing.TB) (certPEM, keyPEM string) {
	t.Helper()
	kp, err := testpki.NewTestCA(t, "execcred-test-ca").IssueClient("client", "alice")
	if err != nil {
		t.Fatal(err)
	}
	return string(kp.CertPEM), string(kp.KeyPEM)
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
