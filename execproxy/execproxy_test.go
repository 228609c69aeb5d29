//go:build unix

package execproxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/plugin"
	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/internal/reverseproxy"
	"github.com/kplug/kplug/internal/testkit/exectest"
)

// dialAsEnv makes the test binary try to connect to the unix socket it names and print the
// outcome: the "other local user" of TestOtherUsersCannotConnect.
const dialAsEnv = "KPLUG_EXECPROXY_DIAL"

// selfProxy is the fake plugin behaviour "self-proxy" (internal/exectest): an exec plugin
// that is its own proxy. It answers, closes stdout and stderr, and serves in $SOCKET_DIR
// until its client releases the lock; it writes its pid to pid in the fake's directory.
func selfProxy() int {
	_ = os.WriteFile(filepath.Join(os.Getenv(exectest.Env), "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600)
	info, err := plugin.LoadInfo(os.Getenv(execcred.InfoEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	upstream, err := execcred.ClusterConfig(info)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = server.Serve(context.Background(), server.Options{ //nolint:forbidigo // a helper process: no test here
		Upstream:     upstream,
		LockFilePath: info.LockFilePath,
		SocketDir:    os.Getenv("SOCKET_DIR"),
		Ready: func(s *execcred.Status) {
			_ = plugin.Write(os.Stdout, info, s)
			_ = os.Stdout.Close()
			_ = os.Stderr.Close()
		},
	})
	if err != nil {
		return 1
	}
	return 0
}

func TestMain(m *testing.M) {
	exectest.Main(map[string]func() int{"self-proxy": selfProxy, "lock-fds": reportLockFDs})
	if addr := os.Getenv(connectEnv); addr != "" {
		connectAndPrintStatus(addr)
		os.Exit(0)
	}
	if addr := os.Getenv(holdEnv); addr != "" {
		holdConnections(addr)
		os.Exit(0)
	}
	if socket := os.Getenv(dialAsEnv); socket != "" {
		conn, err := net.Dial("unix", socket)
		if err != nil {
			fmt.Print(err)
			os.Exit(0)
		}
		conn.Close()
		fmt.Print("connected")
		os.Exit(0)
	}
	// spdystream's Close leaves a goroutine that waits for the peer's streams to drain; it
	// belongs to the SPDY client and server of the streaming tests, not to kplug.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/moby/spdystream.(*Connection).shutdown"))
}

// upstream is a stand-in API server for the proxy unit tests: it echoes what it received,
// streams, and accepts a protocol upgrade.
func upstream(t *testing.T) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/watch": // one event now, one after the client says so
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintln(w, `{"type":"ADDED"}`)
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
		case "/upgrade":
			if r.Header.Get("Upgrade") != "echo" || r.ProtoMajor != 1 {
				http.Error(w, "want an HTTP/1.1 echo upgrade", http.StatusBadRequest)
				return
			}
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			_ = rw.Flush()
			line, _ := rw.ReadString('\n')
			_, _ = rw.WriteString("echo: " + line)
			_ = rw.Flush()
		case "/groups":
			fmt.Fprintf(w, "%d Impersonate-Group values", len(r.Header.Values("Impersonate-Group")))
		default:
			fmt.Fprintf(w, "%s %s auth=%q injected=%q proto=%s", r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-Injected"), r.Proto)
		}
	}))
	reverseproxy.LimitHeaders(srv.Config, reverseproxy.MaxHeaderBytes) // as kube-apiserver
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

type running struct {
	status *execcred.Status
	done   chan error
	cancel context.CancelFunc
	lock   *execproxy.Lock
	dir    string
}

// serve starts a proxy for a client holding a fresh lock, as a plugin would.
func serve(t *testing.T, up *httptest.Server, mutate func(*server.Options)) *running {
	t.Helper()
	dir, err := os.MkdirTemp("", "kp") // short: socket paths are limited to ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lock, err := execproxy.NewLock(filepath.Join(dir, "client"))
	if err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw})
	ready := make(chan *execcred.Status, 1)
	o := server.Options{
		Upstream:     &rest.Config{Host: up.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}},
		LockFilePath: lock.Path,
		SocketDir:    filepath.Join(dir, "proxy"),
		Ready:        func(s *execcred.Status) { ready <- s },
	}
	if mutate != nil {
		mutate(&o)
	}
	ctx, cancel := context.WithCancel(t.Context())
	r := &running{done: make(chan error, 1), cancel: cancel, lock: lock, dir: dir}
	go func() { r.done <- server.Serve(ctx, o) }()
	select {
	case r.status = <-ready:
	case err := <-r.done:
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = lock.Close()
	})
	return r
}

func (r *running) credential(t *testing.T) *execcred.Credential {
	t.Helper()
	out, err := json.Marshal(execcred.ExecCredential{Kind: execcred.Kind, APIVersion: execcred.V1, Spec: struct{}{}, Status: r.status})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := execcred.DecodeOutput(execcred.V1, out)
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// proxied returns a client configuration that reaches upURL through the running proxy,
// with a bridge for upgrades.
func proxied(t *testing.T, r *running, upURL string) (*rest.Config, *execproxy.Bridge) {
	t.Helper()
	s, err := execproxy.NewSession(&rest.Config{Host: upURL, BearerToken: "must-not-reach-the-proxy"}, r.credential(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cfg, err := s.Config()
	if err != nil {
		t.Fatal(err)
	}
	return cfg, s.Bridge()
}

// client returns an HTTP client that reaches up through the proxy.
func client(t *testing.T, r *running, upURL string) (*http.Client, *execproxy.Bridge) {
	t.Helper()
	cfg, b := proxied(t, r, upURL)
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: rt, Timeout: 10 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	return c, b
}

func get(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestForwardsAndModifiesRequests(t *testing.T) {
	up := upstream(t)
	reg := prometheus.NewPedanticRegistry()
	m, err := server.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := serve(t, up, func(o *server.Options) {
		o.ModifyRequest = func(req *http.Request) error { req.Header.Set("X-Injected", "by-plugin"); return nil }
		o.Metrics = m
	})
	c, _ := client(t, r, up.URL)
	if got, want := get(t, c, up.URL+"/api/v1/pods"), `GET /api/v1/pods auth="" injected="by-plugin" proto=HTTP/2.0`; got != want {
		t.Errorf("upstream saw %q, want %q", got, want)
	}
	// The proxy records a request once its handler returns, which may be just after the
	// client has read the whole answer.
	var n int
	for deadline := time.Now().Add(5 * time.Second); n == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n, err = testutil.GatherAndCount(reg, "kplug_exec_proxy_requests_total"); err != nil {
			t.Fatal(err)
		}
	}
	if n != 1 {
		t.Errorf("kplug_exec_proxy_requests_total series = %d", n)
	}
}

// TestManyGroupsPass (issue 28): Go 1.27 answers 431 to a request with more than 500
// header values unless its server says otherwise, and a user in many groups sends a line of
// Impersonate-Group for each. The proxy takes what kube-apiserver takes, through its socket
// and through the bridge that unmodified clients reach it by. (Built with Go 1.26, which
// counts no values, this passes without the proxy's limits too.)
func TestManyGroupsPass(t *testing.T) {
	up := upstream(t)
	r := serve(t, up, nil)
	viaSocket, b := client(t, r, up.URL)
	viaBridge := &http.Transport{Proxy: http.ProxyURL(b.ProxyURL()), TLSClientConfig: proxyTLS(t, r.credential(t))}
	t.Cleanup(viaBridge.CloseIdleConnections)
	for name, rt := range map[string]http.RoundTripper{"socket": viaSocket.Transport, "bridge": viaBridge} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, up.URL+"/groups", nil)
			for i := range 600 {
				req.Header.Add("Impersonate-Group", fmt.Sprintf("group-%03d", i))
			}
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if got, want := fmt.Sprintf("%d %s", resp.StatusCode, body), "200 600 Impersonate-Group values"; got != want {
				t.Errorf("upstream answered %q, want %q", got, want)
			}
		})
	}
}

func TestWatchEventsArriveUnbuffered(t *testing.T) {
	up := upstream(t)
	r := serve(t, up, nil)
	c, _ := client(t, r, up.URL)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL+"/watch", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The upstream holds the response open; the first event must still arrive.
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "{\"type\":\"ADDED\"}\n" {
		t.Errorf("first event %q, %v", line, err)
	}
}

func TestUpgradeThroughBothHops(t *testing.T) {
	up := upstream(t)
	r := serve(t, up, nil)
	_, b := client(t, r, up.URL)
	cred := r.credential(t)
	// Speak HTTP/1.1 through the bridge's CONNECT tunnel and the proxy's TLS, as SPDY and
	// WebSocket clients do.
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", up.Listener.Addr(), up.Listener.Addr(), proxyAuthorization(b.ProxyURL()))
	br := bufio.NewReader(conn)
	if status, _ := br.ReadString('\n'); !strings.Contains(status, "200") {
		t.Fatalf("CONNECT: %q", status)
	}
	for line, _ := br.ReadString('\n'); line != "\r\n" && line != ""; line, _ = br.ReadString('\n') {
	}
	tlsConn := tls.Client(&prefixConn{Conn: conn, r: br}, proxyTLS(t, cred))
	fmt.Fprintf(tlsConn, "GET /upgrade HTTP/1.1\r\nHost: k\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	tr := bufio.NewReader(tlsConn)
	status, err := tr.ReadString('\n')
	if err != nil || !strings.Contains(status, "101") {
		t.Fatalf("upgrade answered %q, %v", status, err)
	}
	for line, _ := tr.ReadString('\n'); line != "\r\n" && line != ""; line, _ = tr.ReadString('\n') {
	}
	fmt.Fprintf(tlsConn, "hello\n")
	if got, _ := tr.ReadString('\n'); got != "echo: hello\n" {
		t.Errorf("after the upgrade: %q", got)
	}
}

func TestRefusesConnectionsWithoutTheIssuedCertificate(t *testing.T) {
	up := upstream(t)
	r := serve(t, up, nil)
	cred := r.credential(t)
	cfg := proxyTLS(t, cred)
	cfg.Certificates, cfg.GetClientCertificate = nil, nil
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "unix", execproxy.SocketPath(cred.Proxy))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tc := tls.Client(conn, cfg)
	err = tc.Handshake()
	if err == nil {
		_, err = tc.Read(make([]byte, 1)) // TLS 1.3 reports the rejection after the handshake
	}
	if err == nil {
		t.Error("the proxy accepted a client without a certificate")
	}
	info, err := os.Stat(execproxy.SocketPath(cred.Proxy))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, %v; want 0600", info.Mode().Perm(), err)
	}
}

func TestServeEndsWhenTheClientReleasesItsLock(t *testing.T) {
	up := upstream(t)
	r := serve(t, up, nil)
	socket := execproxy.SocketPath(r.status.ProxyConfig)
	if err := r.lock.Close(); err != nil { // what the kernel does when the client dies
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy outlived its client")
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
}

func TestIdleTimeoutAndStaleSockets(t *testing.T) {
	up := upstream(t)
	r := serve(t, up, func(o *server.Options) { o.IdleTimeout = 100 * time.Millisecond })
	select {
	case err := <-r.done:
		r.done <- err
	case <-time.After(5 * time.Second):
		t.Fatal("the idle proxy did not exit")
	}
	// A socket nobody listens on (a killed proxy) is removed by the next proxy; a live one stays.
	stale := filepath.Join(r.dir, "proxy", "proxy-dead.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = ln.Close()
	r2 := serve(t, up, func(o *server.Options) { o.SocketDir = filepath.Join(r.dir, "proxy") })
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale socket not removed: %v", err)
	}
	r3 := serve(t, up, func(o *server.Options) { o.SocketDir = filepath.Join(r.dir, "proxy") })
	if _, err := os.Stat(execproxy.SocketPath(r2.status.ProxyConfig)); err != nil {
		t.Errorf("a live proxy's socket was removed when another started: %v", err)
	}
	_ = r3
}

func TestRequiresLockFile(t *testing.T) {
	err := server.Serve(t.Context(), server.Options{Upstream: &rest.Config{Host: "https://k"}, SocketDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "did not send spec.lockFilePath") {
		t.Errorf("err = %v", err)
	}
}

func proxyTLS(t *testing.T, cred *execcred.Credential) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cred.Proxy.CertificateAuthorityData)
	return &tls.Config{RootCAs: pool, ServerName: wire.ProxyServerName, Certificates: []tls.Certificate{*cred.Certificate}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
}

// connectEnv makes the test binary send a CONNECT request to the bridge at the address it
// names, with the Proxy-Authorization header in $CONNECT_AUTH if set, and print the status
// line: the other local user of TestSecurityBridgeRefusesOtherUsers.
const connectEnv = "KPLUG_EXECPROXY_CONNECT"

func connectAndPrintStatus(addr string) {
	status, err := connect(context.Background(), addr, os.Getenv("CONNECT_AUTH")) //nolint:forbidigo // a helper process: no test here
	if err != nil {
		fmt.Print(err)
		return
	}
	fmt.Print(status)
}

// holdEnv makes the test binary open $HOLD_N connections to the bridge at the address it
// names, send nothing on them, print how many it opened, and keep them until its stdin
// closes: the other local user of TestSecurityBridgeIdleConnectionsOfAnotherUser.
const holdEnv = "KPLUG_EXECPROXY_HOLD"

func holdConnections(addr string) {
	n, _ := strconv.Atoi(os.Getenv("HOLD_N"))
	var held []net.Conn
	for range n {
		c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(context.Background(), "tcp", addr) //nolint:forbidigo // a helper process: no test here
		if err != nil {
			break
		}
		held = append(held, c)
	}
	fmt.Printf("held %d\n", len(held))
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		_ = c.Close()
	}
}

// connect sends a CONNECT request to the bridge at addr and returns the response's status
// line.
func connect(ctx context.Context, addr, auth string) (string, error) {
	conn, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	req := "CONNECT k:443 HTTP/1.1\r\nHost: k:443\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := fmt.Fprint(conn, req+"\r\n"); err != nil {
		return "", err
	}
	status, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(status), err
}

// proxyAuthorization is the Proxy-Authorization header value for the credentials in u, as
// Go's HTTP clients send it.
func proxyAuthorization(u *url.URL) string {
	password, _ := u.User.Password()
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+password))
}

// prefixConn reads first what a bufio.Reader already buffered.
type prefixConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

func TestStaleLockFilesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	held, err := execproxy.NewLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	stale := filepath.Join(dir, "client-0000000000000000.lock")
	for _, f := range []string{stale, stale + ".identity", stale + ".log"} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	for _, f := range []string{stale, held.Path} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	l, err := execproxy.NewLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if left, _ := filepath.Glob(stale + "*"); len(left) != 0 {
		t.Errorf("stale files left: %v", left)
	}
	if _, err := os.Stat(held.Path); err != nil {
		t.Errorf("a held lock was removed: %v", err)
	}
}

func TestOtherUsersCannotConnect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a process as a second user")
	}
	up := upstream(t)
	r := serve(t, up, nil)
	socket := execproxy.SocketPath(r.status.ProxyConfig)
	// The test binary must be reachable by the other user.
	binDir, err := os.MkdirTemp("", "kplug-dialer")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(binDir)
	bin := filepath.Join(binDir, "dialer")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{dialAsEnv + "=" + socket}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("running as uid 65534: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "permission denied") {
		t.Errorf("another user connecting to the proxy socket: %q, want permission denied", out)
	}
}
