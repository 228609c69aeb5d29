package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"

	"github.com/kplug/kplug/internal/cli"
	"github.com/kplug/kplug/internal/testkit/testlog"
	"github.com/kplug/kplug/mvproxy/discovery"
	"github.com/kplug/kplug/test/e2e/framework"
)

const jobsPath = "/apis/batch/v1/namespaces/default/jobs"

// sidecar is one `kplug peerproxy` running in this process.
type sidecar struct {
	URL     string
	Metrics string // http://host:port/metrics
	cancel  context.CancelFunc
	done    chan struct{} // closed when peerproxy returned code
	code    int
	log     *testlog.Buffer
}

func (s *sidecar) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	<-s.done
	if s.code != 0 {
		t.Errorf("peerproxy exited with %d:\n%s", s.code, s.log.String())
	}
}

// startSidecar runs `kplug peerproxy` beside apiserver i in the documented setup: peers
// verify each other with a dedicated peer CA, each presenting a certificate from it for
// the peer server name; the sidecar runs as the user docs/peerproxy-rbac.yaml grants,
// with its Leases in the namespace only sidecars write to (framework.Sidecars). It stops
// when the test ends.
func startSidecar(t testing.TB, cp *framework.ControlPlane, i int) *sidecar {
	t.Helper()
	flags, err := setupSidecars(t, cp).PeerFlags(cp, i)
	if err != nil {
		t.Fatal(err)
	}
	return startSidecarWith(t, cp, i, flags...)
}

// leaseNamespace is the namespace docs/peerproxy-rbac.yaml gives the sidecars.
const leaseNamespace = framework.LeaseNamespace

func setupSidecars(t testing.TB, cp *framework.ControlPlane) *framework.Sidecars {
	t.Helper()
	s, err := cp.Sidecars(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startSidecarWith runs `kplug peerproxy` beside apiserver i with peerFlags for the peer
// CA and the certificate presented to peers.
func startSidecarWith(t testing.TB, cp *framework.ControlPlane, i int, peerFlags ...string) *sidecar {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := setupSidecars(t, cp).PeerproxyArgs(cp, i, addr, metricsAddr, peerFlags...)
	return runInProcess(t, "peerproxy beside "+cp.Servers[i].Name, args, "https://"+addr, "http://"+metricsAddr+"/metrics")
}

// runInProcess runs the kplug command args in this process until the test ends, and
// prints its output, labelled what, if the test failed.
func runInProcess(t testing.TB, what string, args []string, url, metrics string) *sidecar {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	s := &sidecar{URL: url, Metrics: metrics, cancel: cancel, done: make(chan struct{}), log: &testlog.Buffer{}}
	go func() {
		defer close(s.done)
		s.code = cli.Run(ctx, args, cli.IO{In: strings.NewReader(""), Out: s.log, Err: s.log})
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
		if t.Failed() {
			t.Logf("===== %s =====\n%s", what, s.log.String())
		}
	})
	return s
}

// TestMixedVersionProxySidecar: two apiservers on one etcd, the second without batch/v1,
// each with a kplug peerproxy beside it; clients talk only to the sidecars.
func TestMixedVersionProxySidecar(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{
		{},
		{Flags: []string{"--runtime-config=batch/v1=false"}},
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	sides := []*sidecar{startSidecar(t, cp, 0), startSidecar(t, cp, 1)}
	kubeconfigs := sidecarKubeconfigs(t, cp, sides)
	admin := userClient(t, cp, cp.Admin)

	// Sidecar 1's apiserver does not serve batch/v1: the request succeeds through it once
	// it knows its peer.
	eventually(ctx, t, "jobs listed through the sidecar of the server without batch/v1", func() error {
		return expectStatus(ctx, admin, sides[1].URL+jobsPath, nil, http.StatusOK)
	})

	t.Run("kubectl creates, lists and watches jobs through either sidecar", func(t *testing.T) {
		if out, err := kubectl(ctx, cp, kubeconfigs[cp.Admin.Name], 1, "create", "job", "one", "--image=registry.example/none"); err != nil {
			t.Fatalf("kubectl create job via sidecar 1: %v\n%s", err, out)
		}
		for i := range sides {
			out, err := kubectl(ctx, cp, kubeconfigs[cp.Admin.Name], i, "get", "jobs", "-o", "name")
			if err != nil || strings.TrimSpace(string(out)) != "job.batch/one" {
				t.Errorf("kubectl get jobs via sidecar %d: %q, %v", i, out, err)
			}
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		watch := exec.CommandContext(wctx, filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig="+kubeconfigs[cp.Admin.Name],
			"--context=sidecar-1", "get", "jobs", "--watch", "-o", "name")
		stdout, err := watch.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { wcancel(); _ = watch.Wait() }()
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() || lines.Text() != "job.batch/one" {
			t.Fatalf("kubectl watch: first line %q, want job.batch/one", lines.Text())
		}
		if out, err := kubectl(ctx, cp, kubeconfigs[cp.Admin.Name], 0, "create", "job", "two", "--image=registry.example/none"); err != nil {
			t.Fatalf("kubectl create job via sidecar 0: %v\n%s", err, out)
		}
		for lines.Scan() {
			if lines.Text() == "job.batch/two" {
				return
			}
		}
		t.Error("kubectl watch through sidecar 1 never showed job.batch/two")
	})

	t.Run("metrics", func(t *testing.T) {
		code, body, err := do(ctx, http.DefaultClient, sides[1].Metrics, nil)
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %s: %d %v", sides[1].Metrics, code, err)
		}
		for _, want := range []string{
			`apiserver_rerouted_request_total{code="200",group="batch",resource="jobs",version="v1"}`,
			`apiserver_rerouted_request_total{code="201",group="batch",resource="jobs",version="v1"} 1`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("sidecar 1 metrics lack %s", want)
			}
		}
	})

	t.Run("merged discovery", func(t *testing.T) {
		for i, s := range sides {
			merged := discoveryGroups(ctx, t, admin, s.URL, acceptAggregated)
			if !slices.Contains(merged, "batch") || !slices.Contains(merged, "apps") {
				t.Errorf("sidecar %d: merged /apis groups %v lack batch or apps", i, merged)
			}
			local := discoveryGroups(ctx, t, admin, s.URL, acceptAggregated+";profile=nopeer")
			if got, want := slices.Contains(local, "batch"), i == 0; got != want {
				t.Errorf("sidecar %d: profile=nopeer lists batch: %v, want %v", i, got, want)
			}
		}
		// Each sidecar lists its apiserver's groups first, as its apiserver lists them,
		// then the groups only peers serve.
		for i, s := range sides {
			local := discoveryGroups(ctx, t, admin, s.URL, acceptAggregated+";profile=nopeer")
			want := local
			if !slices.Contains(local, "batch") {
				want = append(slices.Clone(local), "batch")
			}
			if got := discoveryGroups(ctx, t, admin, s.URL, acceptAggregated); !slices.Equal(got, want) {
				t.Errorf("sidecar %d: merged groups\n%v\nwant\n%v", i, got, want)
			}
		}
		out, err := kubectl(ctx, cp, kubeconfigs[cp.Admin.Name], 1, "api-resources", "--api-group=batch", "-o", "name")
		if err != nil || !strings.Contains(string(out), "jobs") {
			t.Errorf("kubectl api-resources via sidecar 1: %q, %v", out, err)
		}
	})

	// kube-apiserver 1.35 and later serve aggregated discovery v2beta1 no more (1.38
	// removed it): a v2beta1 clause is passed over for the next. The sidecar does the
	// same, so a client listing v2beta1 first gets the merged v2 document; and what the
	// apiserver answers when nothing else is acceptable, or for a path nothing serves, the
	// sidecar passes on unchanged.
	t.Run("discovery v2beta1 and unknown paths as kube-apiserver answers them", func(t *testing.T) {
		const v2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
		s, direct := sides[1], cp.Servers[1].URL
		if got := discoveryGroups(ctx, t, admin, s.URL, v2beta1+","+acceptAggregated); !slices.Contains(got, "batch") {
			t.Errorf("v2beta1 then v2 via sidecar 1: %v, want the merged groups (batch from the peer)", got)
		}
		for _, tt := range []struct {
			path, accept string
			want         int
		}{
			{"/apis", v2beta1, http.StatusNotAcceptable},
			{"/apis", v2beta1 + ",application/json", http.StatusOK}, // legacy APIGroupList
			{"/apis/nothing.example.com/v1/things", "application/json", http.StatusNotFound},
			{"/apis/batch/v9/jobs", "application/json", http.StatusNotFound},
		} {
			hdr := http.Header{"Accept": {tt.accept}}
			code, body := get(ctx, t, admin, direct+tt.path, hdr)
			viaCode, viaBody := get(ctx, t, admin, s.URL+tt.path, hdr)
			if code != tt.want || viaCode != code || viaBody != body {
				t.Errorf("GET %s (%s): via sidecar 1 %d %.200q, from its apiserver %d %.200q; want %d from both", tt.path, tt.accept, viaCode, viaBody, code, body, tt.want)
			}
		}
	})

	// Aggregated discovery in protobuf, which kube-apiserver serves to clients that ask:
	// merged too, with the JSON answer's ETag; profile=nopeer in protobuf is
	// kube-apiserver's own answer.
	t.Run("merged discovery in protobuf", func(t *testing.T) {
		s := sides[1]
		fetch := func(accept string) (string, string, []string) {
			t.Helper()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/apis", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept", accept)
			resp, err := admin.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /apis (%s): %d %.200q", accept, resp.StatusCode, body)
			}
			l, err := discovery.DecodeProtobuf(body)
			if err != nil {
				t.Fatalf("%s: %v", accept, err)
			}
			var names []string
			for _, g := range l.Items {
				names = append(names, g.Name)
			}
			return resp.Header.Get("Content-Type"), resp.Header.Get("ETag"), names
		}
		ctype, etag, merged := fetch(discovery.AcceptAggregatedProtobuf + "," + discovery.AcceptAggregated + ",application/json")
		if ctype != discovery.AcceptAggregatedProtobuf || !slices.Equal(merged, discoveryGroups(ctx, t, admin, s.URL, acceptAggregated)) {
			t.Errorf("protobuf via sidecar 1: %s %v, want the merged JSON groups", ctype, merged)
		}
		if code, _, _ := do(ctx, admin, s.URL+"/apis", http.Header{"Accept": {acceptAggregated}, "If-None-Match": {etag}}); code != http.StatusNotModified {
			t.Errorf("JSON with the protobuf answer's ETag: %d, want 304", code)
		}
		if _, _, local := fetch(discovery.AcceptAggregatedProtobuf + ";profile=nopeer"); slices.Contains(local, "batch") || !slices.Contains(local, "apps") {
			t.Errorf("protobuf profile=nopeer via sidecar 1: %v, want the local server's groups", local)
		}
	})

	t.Run("identities are forwarded and forged headers ignored", func(t *testing.T) {
		// alice (client certificate) and bob (token) may not list jobs: the capable
		// server must see them as themselves, through both hops.
		for _, u := range []*framework.User{cp.CertUser, cp.TokenUser} {
			c := userClient(t, cp, u)
			for i, s := range sides {
				hdr := http.Header{"X-Remote-User": {"kplug-admin"}, "X-Remote-Group": {"system:masters"}}
				code, body := get(ctx, t, c, s.URL+jobsPath, hdr)
				if code != http.StatusForbidden || !strings.Contains(body, `User \"`+u.Name+`\"`) {
					t.Errorf("%s via sidecar %d: %d %s", u.Name, i, code, body)
				}
			}
		}
		// A client's loop guard is stripped, so it cannot make the sidecar answer 404.
		hdr := http.Header{"X-Kubernetes-Peer-Proxied": {"true"}}
		if err := expectStatus(ctx, admin, sides[1].URL+jobsPath, hdr, http.StatusOK); err != nil {
			t.Errorf("forged guard header: %v", err)
		}
	})

	t.Run("503 while the capable apiserver is down, back when it returns", func(t *testing.T) {
		cp.Servers[0].Stop()
		for i, s := range sides {
			code, body := get(ctx, t, admin, s.URL+jobsPath, nil)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "unreachable") {
				t.Errorf("sidecar %d with the capable apiserver down: %d %s", i, code, body)
			}
		}
		// Sidecar 1 keeps its peer's last-known discovery and marks it Stale.
		eventually(ctx, t, "batch/v1 Stale in sidecar 1's merged discovery", func() error {
			return batchFreshness(ctx, admin, sides[1].URL, "Stale")
		})
		if err := cp.Restart(ctx, 0); err != nil {
			t.Fatal(err)
		}
		eventually(ctx, t, "jobs through sidecar 1 after the capable apiserver returned", func() error {
			return expectStatus(ctx, admin, sides[1].URL+jobsPath, nil, http.StatusOK)
		})
		eventually(ctx, t, "batch/v1 Current again", func() error {
			return batchFreshness(ctx, admin, sides[1].URL, "Current")
		})
	})

	t.Run("a peer that leaves takes its resources with it", func(t *testing.T) {
		sides[0].stop(t) // graceful: deletes its Lease
		eventually(ctx, t, "404 for jobs through sidecar 1 once its only capable peer left", func() error {
			return expectStatus(ctx, admin, sides[1].URL+jobsPath, nil, http.StatusNotFound)
		})
		merged := discoveryGroups(ctx, t, admin, sides[1].URL, acceptAggregated)
		if slices.Contains(merged, "batch") {
			t.Errorf("merged discovery still lists batch after the peer left: %v", merged)
		}
	})
}

const acceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// userClient is an HTTP client that authenticates as u and trusts the cluster CA.
func userClient(t testing.TB, cp *framework.ControlPlane, u *framework.User) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(cp.PKI.ClusterCA.Cert)
	tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if u.Cert != nil {
		cert, err := tls.X509KeyPair(u.Cert.CertPEM, u.Cert.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: tc}
	if u.Token != "" {
		rt = transport.NewBearerAuthRoundTripper(u.Token, rt)
	}
	c := &http.Client{Transport: rt, Timeout: 30 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func do(ctx context.Context, c *http.Client, url string, hdr http.Header) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func get(ctx context.Context, t *testing.T, c *http.Client, url string, hdr http.Header) (int, string) {
	t.Helper()
	code, body, err := do(ctx, c, url, hdr)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return code, body
}

func expectStatus(ctx context.Context, c *http.Client, url string, hdr http.Header, want int) error {
	code, body, err := do(ctx, c, url, hdr)
	if err != nil {
		return err
	}
	if code != want {
		return fmt.Errorf("GET %s: %d, want %d: %.300s", url, code, want, body)
	}
	return nil
}

// eventually retries f until it succeeds, failing the test when ctx or a minute ends.
func eventually(ctx context.Context, t *testing.T, what string, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: still failing: %v", what, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func discoveryGroups(ctx context.Context, t *testing.T, c *http.Client, base, accept string) []string {
	t.Helper()
	code, body := get(ctx, t, c, base+"/apis", http.Header{"Accept": {accept}})
	if code != http.StatusOK {
		t.Fatalf("GET %s/apis: %d %.300s", base, code, body)
	}
	var l apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal([]byte(body), &l); err != nil || l.Kind != "APIGroupDiscoveryList" {
		t.Fatalf("GET %s/apis: not aggregated discovery (%v): %.300s", base, err, body)
	}
	var names []string
	for _, g := range l.Items {
		names = append(names, g.Name)
	}
	return names
}

// batchFreshness checks the freshness of batch/v1 in base's merged discovery.
func batchFreshness(ctx context.Context, c *http.Client, base, want string) error {
	code, body, err := do(ctx, c, base+"/apis", http.Header{"Accept": {acceptAggregated}})
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET /apis: %d %.200s", code, body)
	}
	var l apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		return err
	}
	for _, g := range l.Items {
		for _, v := range g.Versions {
			if g.Name == "batch" && v.Version == "v1" {
				if string(v.Freshness) != want {
					return fmt.Errorf("batch/v1 freshness %q, want %q", v.Freshness, want)
				}
				return nil
			}
		}
	}
	return fmt.Errorf("no batch/v1 in merged discovery")
}

// sidecarKubeconfigs writes, for each user, a kubeconfig whose contexts sidecar-<i> point
// at the sidecars; it returns them by user name.
func sidecarKubeconfigs(t *testing.T, cp *framework.ControlPlane, sides []*sidecar) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, u := range []*framework.User{cp.Admin, cp.CertUser, cp.TokenUser} {
		cfg := clientcmdapi.NewConfig()
		auth := clientcmdapi.NewAuthInfo()
		auth.Token = u.Token
		if u.Cert != nil {
			auth.ClientCertificateData, auth.ClientKeyData = u.Cert.CertPEM, u.Cert.KeyPEM
		}
		cfg.AuthInfos[u.Name] = auth
		for i, s := range sides {
			name := fmt.Sprintf("sidecar-%d", i)
			cluster := clientcmdapi.NewCluster()
			cluster.Server = s.URL
			cluster.CertificateAuthorityData = cp.PKI.ClusterCA.CertPEM
			cfg.Clusters[name] = cluster
			c := clientcmdapi.NewContext()
			c.Cluster, c.AuthInfo = name, u.Name
			cfg.Contexts[name] = c
		}
		cfg.CurrentContext = "sidecar-0"
		path := filepath.Join(t.TempDir(), u.Name+".kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			t.Fatal(err)
		}
		out[u.Name] = path
	}
	return out
}

// kubectl runs the pinned kubectl through sidecar i, with a cache directory of its own.
func kubectl(ctx context.Context, cp *framework.ControlPlane, kubeconfig string, i int, args ...string) ([]byte, error) {
	args = append([]string{"--kubeconfig=" + kubeconfig, fmt.Sprintf("--context=sidecar-%d", i),
		"--cache-dir=" + filepath.Join(filepath.Dir(kubeconfig), fmt.Sprintf("cache-%d", i))}, args...)
	return exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), args...).CombinedOutput()
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
