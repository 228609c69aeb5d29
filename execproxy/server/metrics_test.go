package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"
)

// TestMetrics: proxies that register with one registry share its series; a method HTTP
// does not define is counted as "other", so that a client cannot grow the registry; and
// requests the API server never saw are counted as upstream errors.
func TestMetrics(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	defer up.Close()
	reg := prometheus.NewPedanticRegistry()
	m1, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := NewMetrics(reg) // a second proxy in the same process
	if err != nil {
		t.Fatalf("a second NewMetrics on one registry: %v", err)
	}
	if _, err := NewMetrics(nil); err != nil {
		t.Errorf("NewMetrics(nil): %v", err)
	}
	serve := func(m *Metrics, host, method string) {
		t.Helper()
		h, err := newHandler(Options{Upstream: &rest.Config{Host: host}, Metrics: m}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, "/api", nil))
	}
	serve(m1, up.URL, http.MethodGet)
	serve(m2, up.URL, "BREW")
	serve(m2, up.URL, strings.Repeat("X", 300))
	serve(m1, "http://127.0.0.1:1", http.MethodGet) // nothing listens there
	want := `
# HELP kplug_exec_proxy_requests_total Requests the exec proxy forwarded, by method and status code.
# TYPE kplug_exec_proxy_requests_total counter
kplug_exec_proxy_requests_total{code="418",method="GET"} 1
kplug_exec_proxy_requests_total{code="418",method="other"} 2
kplug_exec_proxy_requests_total{code="502",method="GET"} 1
# HELP kplug_exec_proxy_upstream_errors_total Requests the exec proxy could not forward to the API server.
# TYPE kplug_exec_proxy_upstream_errors_total counter
kplug_exec_proxy_upstream_errors_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kplug_exec_proxy_requests_total", "kplug_exec_proxy_upstream_errors_total"); err != nil {
		t.Error(err)
	}
}
