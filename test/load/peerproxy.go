package load

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/test/e2e/framework"
	"github.com/kplug/kplug/test/e2e/traffic"
)

// BuildKplug builds kplug-profiled (kplug serving pprof for the harness) into a
// directory of the test's as kplug, with kplug-proxy-plugin-profiled beside it as
// kplug-proxy-plugin, as make install puts them: the exec proxy's daemon is then that
// small program. It returns kplug's path.
func BuildKplug(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	buildProgram(t, "./cmd/kplug-proxy-plugin-profiled", filepath.Join(dir, "kplug-proxy-plugin"))
	return buildProgram(t, "./cmd/kplug-profiled", filepath.Join(dir, "kplug"))
}

// buildProgram builds a package of this module as out.
func buildProgram(t testing.TB, pkg, out string) string {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// Sidecar is one `kplug peerproxy` process.
type Sidecar struct {
	Name    string // "sidecar A"
	Process string // its name in the control plane's logs
	URL     string // https://127.0.0.1:port
	Metrics string // http://127.0.0.1:port/metrics
	Proc    *framework.Process
}

// PeerproxyCluster is the mixed version proxy's setup under load: two kube-apiservers on
// one etcd, A serving everything and B without batch/v1, each with a `kplug peerproxy`
// sidecar in the documented secure setup, as a process of its own; B's sidecar reaches B
// through a Relay. Clients use B's sidecar: ConfigMaps are served by B itself, Jobs by A
// through A's sidecar (proxied to the peer).
type PeerproxyCluster struct {
	CP                 *framework.ControlPlane
	A, B               *framework.APIServer
	SidecarA, SidecarB *Sidecar
	RelayB             *Relay
	Admin              *tls.Config
	PprofDir           string
}

// StartPeerproxy starts the cluster, the sidecars (as kplug, a kplug-profiled binary),
// and waits until Jobs are served through B's sidecar.
func StartPeerproxy(t testing.TB, kplug string) *PeerproxyCluster {
	t.Helper()
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{
		{},
		{Flags: []string{"--runtime-config=batch/v1=false"}},
	}})
	c := &PeerproxyCluster{CP: cp, A: cp.Servers[0], B: cp.Servers[1], PprofDir: t.TempDir()}
	var err error
	if c.Admin, err = cp.ClientTLS(cp.Admin); err != nil {
		t.Fatal(err)
	}
	if c.RelayB, err = NewRelay(strings.TrimPrefix(c.B.URL, "https://")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.RelayB.Close)
	c.SidecarA = c.startSidecar(t, kplug, 0, c.A.URL)
	c.SidecarB = c.startSidecar(t, kplug, 1, "https://"+c.RelayB.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := Eventually(ctx, time.Minute, func() error {
		return c.expect(ctx, c.SidecarB.URL+traffic.Jobs.Collection("default"), http.StatusOK)
	}); err != nil {
		t.Fatalf("jobs through the sidecar of the server without batch/v1: %v\n%s", err, c.SidecarB.Proc.Tail(40))
	}
	return c
}

func (c *PeerproxyCluster) startSidecar(t testing.TB, kplug string, i int, apiserver string) *Sidecar {
	t.Helper()
	ctx := context.Background()
	setup, err := c.CP.Sidecars(ctx)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := setup.PeerFlags(c.CP, i)
	if err != nil {
		t.Fatal(err)
	}
	listen, metrics := freeAddr(t), freeAddr(t)
	name := "peerproxy-" + c.CP.Servers[i].Name
	args := append(setup.PeerproxyArgs(c.CP, i, listen, metrics, peer...), "--apiserver="+apiserver)
	p, err := c.CP.StartProcess(name, append([]string{kplug}, args...), append(os.Environ(), "KPLUG_LOAD_PPROF_DIR="+c.PprofDir))
	if err != nil {
		t.Fatal(err)
	}
	s := &Sidecar{Name: "sidecar " + string(rune('A'+i)), Process: name, URL: "https://" + listen, Metrics: "http://" + metrics + "/metrics", Proc: p}
	if err := Eventually(ctx, time.Minute, func() error { return c.expect(ctx, s.URL+"/version", http.StatusOK) }); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, p.Tail(40))
	}
	return s
}

// expect GETs url as the admin and wants code.
func (c *PeerproxyCluster) expect(ctx context.Context, url string, code int) error {
	tr := &http.Transport{TLSClientConfig: c.Admin}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != code {
		return fmt.Errorf("GET %s: %d, want %d: %.300s", url, resp.StatusCode, code, body)
	}
	return nil
}

// Target returns a traffic target at url, as the admin.
func (c *PeerproxyCluster) Target(name, url string) traffic.Target {
	return traffic.HTTPSTarget(name, url, c.Admin)
}

// Watched returns the processes to measure: both sidecars, and the apiservers for context.
func (c *PeerproxyCluster) Watched() []Watched {
	return []Watched{
		{Name: c.SidecarA.Name, PID: c.SidecarA.Proc.PID, PprofDir: c.PprofDir},
		{Name: c.SidecarB.Name, PID: c.SidecarB.Proc.PID, PprofDir: c.PprofDir},
		{Name: "kube-apiserver A", PID: runningPID(c.A)},
		{Name: "kube-apiserver B", PID: runningPID(c.B)},
		Harness,
	}
}

// Harness is this process, which runs every client of the traffic.
var Harness = Watched{Name: "the harness (all clients)", PID: os.Getpid}

func runningPID(s *framework.APIServer) func() int {
	return func() int {
		if !s.Running() {
			return 0
		}
		return s.PID()
	}
}

// Namespaces creates n namespaces named prefix-<i> as the admin, and returns their names.
func Namespaces(ctx context.Context, cp *framework.ControlPlane, prefix string, n int) ([]string, error) {
	var names []string
	var manifest strings.Builder
	for i := range n {
		name := prefix + "-" + strconv.Itoa(i)
		names = append(names, name)
		fmt.Fprintf(&manifest, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n---\n", name)
	}
	cmd := cp.Kubectl(ctx, cp.Admin, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("creating namespaces: %w\n%s", err, out)
	}
	return names, nil
}

// Metric sums the values of the metric's series whose labels contain every filter.
func Metric(ctx context.Context, url, name string, filters ...string) (float64, error) {
	body, err := fetch(ctx, url, 10*time.Second)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, f := range filters {
			ok = ok && strings.Contains(line, f)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum, nil
}

// Eventually retries f every 100 ms until it succeeds or within has passed.
func Eventually(ctx context.Context, within time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still failing after %v: %w", within, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
