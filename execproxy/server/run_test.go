//go:build unix

package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/poll"
)

func TestMain(m *testing.M) {
	exectest.Main(map[string]func() int{
		// A proxy plugin whose main is server.Main, as a third party writes one.
		"api-key-proxy": func() int { server.Main(addAPIKey); return 0 },
		"fails-when-serving": func() int {
			server.Main(func(_ context.Context, req *server.Request) (*server.Options, func(), error) {
				if req.Serving {
					return nil, nil, errors.New("no key on the token")
				}
				return nil, nil, nil
			})
			return 0
		},
	})
	goleak.VerifyTestMain(m)
}

// client is an exec proxy client: it holds a lock in a short directory of its own (socket
// paths are limited to about 100 bytes) and talks to api.
type client struct {
	dir  string
	lock *execproxy.Lock
	api  *httptest.Server
}

func newClient(t *testing.T) *client {
	t.Helper()
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s with X-Api-Key %q", r.Method, r.URL.Path, r.Header.Get("X-Api-Key"))
	}))
	t.Cleanup(api.Close)
	dir, err := os.MkdirTemp("", "kp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	lock, err := execproxy.NewLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{dir: dir, lock: lock, api: api}
	// Releasing the lock stops every proxy serving this client; wait until they have gone.
	t.Cleanup(func() {
		_ = lock.Close()
		poll.Until(t, "the proxies to remove their sockets", func() bool { return len(c.sockets()) == 0 })
	})
	return c
}

func (c *client) sockets() []string {
	m, _ := filepath.Glob(filepath.Join(c.dir, "proxy-*.sock"))
	return m
}

// execInfo is the client's KUBERNETES_EXEC_INFO; withCluster says whether the kubeconfig
// has provideClusterInfo.
func (c *client) execInfo(withCluster bool) string {
	cluster := ""
	if withCluster {
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.api.Certificate().Raw})
		cluster = fmt.Sprintf(`"cluster":{"server":%q,"certificate-authority-data":%q},`, c.api.URL, base64.StdEncoding.EncodeToString(ca))
	}
	return fmt.Sprintf(`{"kind":"ExecCredential","apiVersion":%q,"spec":{%s"interactive":false,"lockFilePath":%q}}`, execcred.V1, cluster, c.lock.Path)
}

// get sends a request through the proxy an answer names, and returns what the API server saw.
func (c *client) get(t *testing.T, answer []byte) string {
	t.Helper()
	var cred execcred.ExecCredential
	if err := json.Unmarshal(answer, &cred); err != nil || cred.Status == nil || cred.Status.ProxyConfig == nil {
		t.Fatalf("answer %q: %v", answer, err)
	}
	hc, err := hopClient(cred.Status)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, c.api.URL+"/api/v1/pods", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func writeKey(t *testing.T, dir, key string) string {
	t.Helper()
	path := filepath.Join(dir, "api-key")
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMainLaunchesADaemon runs a plugin whose main is server.Main as a client would: the
// launcher checks its arguments, starts itself as a daemon that gets them on stdin, never
// on its command line, and prints the daemon's answer; the daemon logs beside the lock,
// serves, and exits with its client.
func TestMainLaunchesADaemon(t *testing.T) {
	c := newClient(t)
	keyFile := writeKey(t, c.dir, "s3cret")
	fake := exectest.New(t).Behaviour("api-key-proxy").NoStdin()
	cmd := exec.CommandContext(t.Context(), fake.Path(), "--api-key-file", keyFile)
	cmd.Env = append(os.Environ(), append(fake.Env(), execcred.InfoEnv+"="+c.execInfo(true))...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	answer, err := cmd.Output()
	if err != nil {
		t.Fatalf("the launcher: %v, stderr %q", err, stderr.String())
	}
	if got, want := c.get(t, answer), `GET /api/v1/pods with X-Api-Key "s3cret"`; got != want {
		t.Errorf("the API server saw %q, want %q", got, want)
	}
	calls := fake.Calls()
	if len(calls) != 2 {
		t.Fatalf("%d runs of the plugin, want the launcher and its daemon", len(calls))
	}
	if got := strings.Join(calls[1].Args, " "); got != "--exec-proxy-daemon" {
		t.Errorf("the daemon's command line holds %q, want only --exec-proxy-daemon", got)
	}
	if _, err := os.Stat(c.lock.Path + ".log"); err != nil {
		t.Errorf("the daemon's log: %v", err)
	}
	_ = c.lock.Close()
	poll.Until(t, "the daemon to exit with its client", func() bool { return len(c.sockets()) == 0 })
}

// TestMainReportsADaemonThatFails: when the daemon fails before it answers, the launcher
// fails with the daemon's log.
func TestMainReportsADaemonThatFails(t *testing.T) {
	c := newClient(t)
	fake := exectest.New(t).Behaviour("fails-when-serving").NoStdin()
	cmd := exec.CommandContext(t.Context(), fake.Path())
	cmd.Env = append(os.Environ(), append(fake.Env(), execcred.InfoEnv+"="+c.execInfo(true))...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	_, err := cmd.Output()
	var exit *exec.ExitError
	if want := "error: exec proxy: the proxy exited without answering: error: no key on the token\n"; !errors.As(err, &exit) || exit.ExitCode() != 1 || stderr.String() != want {
		t.Errorf("the launcher: %v, stderr %q; want exit code 1 and %q", err, stderr.String(), want)
	}
}

// TestRunChecksInTheLauncher: a launcher runs the Func only to check, then refuses a
// client that sent no lock file; a bad argument is reported first, as the Func said it.
func TestRunChecksInTheLauncher(t *testing.T) {
	var serving []bool
	f := func(_ context.Context, req *server.Request) (*server.Options, func(), error) {
		serving = append(serving, req.Serving)
		if len(req.Args) > 0 {
			return nil, nil, errors.New("bad argument " + req.Args[0])
		}
		return nil, nil, nil
	}
	launcher := server.Process{DaemonArgs: []string{"--daemon"}, Stdout: io.Discard}
	if err := server.Run(t.Context(), f, launcher); err == nil || !strings.HasPrefix(err.Error(), "exec proxy: no lock file: the client did not send spec.lockFilePath") {
		t.Errorf("without a lock file: %v", err)
	}
	launcher.Args = []string{"--bogus"}
	if err := server.Run(t.Context(), f, launcher); err == nil || err.Error() != "bad argument --bogus" {
		t.Errorf("with a bad argument: %v", err)
	}
	if want := []bool{false, false}; fmt.Sprint(serving) != fmt.Sprint(want) {
		t.Errorf("Request.Serving %v, want %v", serving, want)
	}
}

// TestRunWantsClusterInfo: a client that sent a lock file but no spec.cluster gets a
// ConfigError naming provideClusterInfo, before the Func runs.
func TestRunWantsClusterInfo(t *testing.T) {
	c := newClient(t)
	called := false
	f := func(context.Context, *server.Request) (*server.Options, func(), error) {
		called = true
		return nil, nil, nil
	}
	err := server.Run(t.Context(), f, server.Process{ExecInfo: c.execInfo(false), Stdout: io.Discard})
	var ce *server.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "set provideClusterInfo: true in the kubeconfig's exec block") || called {
		t.Errorf("Run = %v (Func called: %v), want a ConfigError before the Func", err, called)
	}
}

// TestDaemonReadsItsArgumentsFromStdin: a daemon serves with its launcher's arguments,
// and releases the options once Serve has returned.
func TestDaemonReadsItsArgumentsFromStdin(t *testing.T) {
	c := newClient(t)
	keyFile := writeKey(t, c.dir, "from-stdin")
	released := make(chan bool, 1)
	f := func(ctx context.Context, req *server.Request) (*server.Options, func(), error) {
		o, _, err := addAPIKey(ctx, req)
		return o, func() { released <- ctx.Err() != nil }, err
	}
	args, _ := json.Marshal([]string{"--api-key-file", keyFile})
	answer, stdout := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- server.Run(t.Context(), f, server.Process{
			Args: []string{"--exec-proxy-daemon"}, DaemonArgs: []string{"--exec-proxy-daemon"}, Daemon: true,
			ExecInfo: c.execInfo(true), Stdin: bytes.NewReader(args), Stdout: stdout,
		})
	}()
	out, _ := io.ReadAll(answer)
	if got, want := c.get(t, out), `GET /api/v1/pods with X-Api-Key "from-stdin"`; got != want {
		t.Errorf("the API server saw %q, want %q", got, want)
	}
	_ = c.lock.Close()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	select {
	case ctxDone := <-released:
		if !ctxDone {
			t.Error("released before the Func's context ended")
		}
	default:
		t.Error("Run returned without releasing the options")
	}

	err := server.Run(t.Context(), f, server.Process{Daemon: true, Stdin: strings.NewReader("--api-key-file x"), Stdout: io.Discard})
	if want := "exec proxy: reading the launcher's arguments from stdin: invalid character '-' in numeric literal"; err == nil || err.Error() != want {
		t.Errorf("bad stdin: %v, want %s", err, want)
	}
}
