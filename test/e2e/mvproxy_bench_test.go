package e2e

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/kplug/kplug/test/e2e/framework"
)

// BenchmarkMixedVersionProxyKubeAPIServer: the sidecar beside kube-apiserver 1.36's own
// mixed version proxy, on real requests (one client, loopback TLS, the admin's client
// certificate). apiserver-0 serves everything; apiserver-1 serves no batch/v1; both have
// the built-in proxy on, and each has a sidecar. Rows:
//
//   - local, direct: a ConfigMap GET to apiserver-1;
//   - local, sidecar: the same through apiserver-1's sidecar;
//   - proxied, built-in: a Job GET to apiserver-1, which proxies it to apiserver-0;
//   - proxied, sidecar: the same through apiserver-1's sidecar, which sends it to
//     apiserver-0's sidecar;
//   - proxied, floor: the Job GET straight to apiserver-0.
func BenchmarkMixedVersionProxyKubeAPIServer(b *testing.B) {
	gate := map[string]bool{builtinProxyGate: true}
	cp := framework.StartForTest(b, framework.Options{Servers: []framework.ServerOptions{
		{FeatureGates: gate},
		{FeatureGates: gate, Flags: []string{"--runtime-config=batch/v1=false"}},
	}})
	ctx, cancel := context.WithTimeout(b.Context(), 2*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"create", "configmap", "bench", "--from-literal=k=v", "-n", "default"},
		{"create", "job", "bench", "--image=registry.example/none", "-n", "default"},
	} {
		if out, err := cp.Kubectl(ctx, cp.Admin, args...).CombinedOutput(); err != nil {
			b.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	sides := []string{startSidecar(b, cp, 0).URL, startSidecar(b, cp, 1).URL}
	admin := userClient(b, cp, cp.Admin)
	const cm, job = "/api/v1/namespaces/default/configmaps/bench", "/apis/batch/v1/namespaces/default/jobs/bench"
	waitOK(ctx, b, admin, sides[1]+job)
	waitOK(ctx, b, admin, cp.Servers[1].URL+job)
	rows := []struct{ name, url string }{
		{"local/direct", cp.Servers[1].URL + cm},
		{"local/sidecar", sides[1] + cm},
		{"proxied/built-in", cp.Servers[1].URL + job},
		{"proxied/sidecar", sides[1] + job},
		{"proxied/floor", cp.Servers[0].URL + job},
	}
	for _, row := range rows {
		b.Run(row.name, func(b *testing.B) {
			getOK(ctx, b, admin, row.url) // connections warm
			b.ResetTimer()
			for b.Loop() {
				getOK(ctx, b, admin, row.url)
			}
		})
	}
}

func getOK(ctx context.Context, b *testing.B, c *http.Client, url string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %s", url, resp.Status)
	}
}

func waitOK(ctx context.Context, b *testing.B, c *http.Client, url string) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body, err := do(ctx, c, url, nil)
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("GET %s: %d %v %.200s", url, code, err, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
