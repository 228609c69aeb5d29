package execcred

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/plugin/pkg/client/auth/exec"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"

	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// The benchmarks run kplug and client-go's exec authenticator (the code kplug replaces)
// side by side, with the same fake plugin and the same server. `make bench` runs them;
// docs/benchmarks.md records the figures.

// benchPlugin makes a fake plugin that answers with token.
func benchPlugin(b *testing.B, token string) *exectest.Plugin {
	b.Helper()
	return exectest.New(b).Stdout(tokenOutput(V1, token, time.Time{}))
}

func benchExecConfig(p *exectest.Plugin) *clientcmdapi.ExecConfig {
	var env []clientcmdapi.ExecEnvVar
	for _, kv := range p.Env() {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, clientcmdapi.ExecEnvVar{Name: name, Value: value})
	}
	return &clientcmdapi.ExecConfig{
		Command: p.Path(), Env: env, APIVersion: V1,
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}
}

// canned answers every request in memory, so that only the authentication work is timed.
type canned struct{}

func (canned) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") == "" {
		return nil, fmt.Errorf("request without credentials")
	}
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

// clientGoRoundTripper wraps base in client-go's exec authenticator.
func clientGoRoundTripper(b *testing.B, ec *clientcmdapi.ExecConfig, base http.RoundTripper) http.RoundTripper {
	b.Helper()
	a, err := exec.GetAuthenticator(ec, nil)
	if err != nil {
		b.Fatal(err)
	}
	tc := &transport.Config{}
	if err := a.UpdateTransportConfig(tc); err != nil {
		b.Fatal(err)
	}
	return tc.WrapTransport(base)
}

func kplugRoundTripper(b *testing.B, ec *clientcmdapi.ExecConfig, base http.RoundTripper) http.RoundTripper {
	b.Helper()
	src, err := NewForRESTConfig(&rest.Config{ExecProvider: ec}, Options{Plugin: quietHost()})
	if err != nil {
		b.Fatal(err)
	}
	return &Transport{Source: src, Base: base}
}

// BenchmarkCachedCredential is the steady state: every request reuses a cached token.
func BenchmarkCachedCredential(b *testing.B) {
	for _, impl := range []struct {
		name string
		rt   func(*testing.B, *clientcmdapi.ExecConfig, http.RoundTripper) http.RoundTripper
	}{{"client-go", clientGoRoundTripper}, {"kplug", kplugRoundTripper}} {
		b.Run("in-memory/"+impl.name, func(b *testing.B) {
			rt := impl.rt(b, benchExecConfig(benchPlugin(b, "bench-"+impl.name)), canned{})
			req, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, "https://k.example/api", nil)
			resp, err := rt.RoundTrip(req) // warm the cache
			if err != nil {
				b.Fatal(err)
			}
			_ = resp.Body.Close()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_ = resp.Body.Close()
			}
		})
		b.Run("loopback-tls/"+impl.name, func(b *testing.B) {
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer bench-") {
					w.WriteHeader(http.StatusUnauthorized)
				}
			}))
			defer srv.Close()
			base := srv.Client().Transport.(*http.Transport).Clone()
			defer base.CloseIdleConnections()
			client := &http.Client{Transport: impl.rt(b, benchExecConfig(benchPlugin(b, "bench-"+impl.name)), base)}
			get := func() {
				req, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, srv.URL, nil)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			get()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				get()
			}
		})
	}
}

// BenchmarkColdConcurrent sends 1000 concurrent requests through a new authenticator and
// reports how many times the plugin ran (execs/op; the goal is exactly 1).
func BenchmarkColdConcurrent(b *testing.B) {
	for _, impl := range []struct {
		name string
		rt   func(*testing.B, *clientcmdapi.ExecConfig, http.RoundTripper) http.RoundTripper
	}{{"client-go", clientGoRoundTripper}, {"kplug", kplugRoundTripper}} {
		b.Run(impl.name, func(b *testing.B) {
			execs := 0
			b.ReportAllocs()
			for b.Loop() {
				// A fresh plugin config each time: client-go caches authenticators per config.
				p := benchPlugin(b, "cold")
				rt := impl.rt(b, benchExecConfig(p), canned{})
				var wg sync.WaitGroup
				for range 1000 {
					wg.Go(func() {
						req, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, "https://k.example/api", nil)
						resp, err := rt.RoundTrip(req)
						if err != nil {
							b.Error(err)
							return
						}
						_ = resp.Body.Close()
					})
				}
				wg.Wait()
				execs += p.Runs()
			}
			b.ReportMetric(float64(execs)/float64(b.N), "execs/op")
		})
	}
}

// sink answers every request in memory after reading its body, whatever its credentials.
type sink struct{}

func (sink) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
	}
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

// BenchmarkSignedRequest is the steady state of in-process signing (KEP-6308) beside a
// bearer token from the same pipeline: a cached credential, a request answered in memory,
// so that only the authentication work is timed. POST has a 4 KiB body, digested.
func BenchmarkSignedRequest(b *testing.B) {
	kp, err := testpki.NewTestCA(b, "bench-ca").IssueClient("signer", "alice")
	if err != nil {
		b.Fatal(err)
	}
	signing, err := json.Marshal(map[string]any{"apiVersion": V1, "kind": Kind, "status": map[string]any{"httpSignature": map[string]any{
		"privateKey": string(kp.KeyPEM), "certificate": string(kp.CertPEM),
		"signedHeaders": map[string]string{"X-K8s-Audience": "https://k.example"},
	}}})
	if err != nil {
		b.Fatal(err)
	}
	body := strings.Repeat("x", 4<<10)
	for _, cred := range []struct {
		name string
		out  string
		h    *HTTPSignature
	}{
		{"bearer", tokenOutput(V1, "bench-token", time.Time{}), nil},
		{"signed-ecdsa-p256-certificate", string(signing), &HTTPSignature{APIVersion: HTTPSignatureAPIVersion}},
	} {
		ec := benchExecConfig(exectest.New(b).Stdout(cred.out))
		cfg := &rest.Config{Host: "https://k.example", ExecProvider: ec}
		var src Source
		if cred.h != nil {
			src, err = newHTTPSignatureSource(cfg, cred.h, Options{Plugin: quietHost()})
		} else {
			src, err = NewForRESTConfig(cfg, Options{Plugin: quietHost()})
		}
		if err != nil {
			b.Fatal(err)
		}
		if _, err := src.Credential(b.Context(), nil); err != nil { // warm the cache
			b.Fatal(err)
		}
		rt := &Transport{Source: src, Base: sink{}}
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			b.Run(cred.name+"/"+method, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					var r io.Reader
					if method == http.MethodPost {
						r = strings.NewReader(body)
					}
					req, _ := http.NewRequestWithContext(b.Context(), method, "https://k.example/api/v1/namespaces/default/configmaps?limit=500", r)
					resp, err := rt.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					_ = resp.Body.Close()
				}
			})
		}
	}
}
