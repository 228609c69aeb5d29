package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplug/kplug/internal/metrics"
)

// Metrics records the proxy side: requests by method and code, errors reaching the API
// server, and latency. Options.Metrics takes it; a nil *Metrics records nothing. It is
// safe for concurrent use, and proxies that register with the same registry share it.
type Metrics struct {
	requests *prometheus.CounterVec
	errors   prometheus.Counter
	latency  *prometheus.HistogramVec
}

// NewMetrics creates the proxy metrics and registers them with reg; a nil reg registers
// nothing.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplug_exec_proxy_requests_total", Help: "Requests the exec proxy forwarded, by method and status code.",
		}, []string{"method", "code"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kplug_exec_proxy_upstream_errors_total", Help: "Requests the exec proxy could not forward to the API server.",
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kplug_exec_proxy_request_duration_seconds", Help: "Time to the end of each forwarded request (streams included).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"method"}),
	}
	if err := metrics.Register(reg, &m.requests); err != nil {
		return nil, err
	}
	if err := metrics.Register(reg, &m.errors); err != nil {
		return nil, err
	}
	if err := metrics.Register(reg, &m.latency); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) observe(method string, code int, d time.Duration) {
	if m == nil {
		return
	}
	method = methodLabel(method)
	m.requests.WithLabelValues(method, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(method).Observe(d.Seconds())
}

func (m *Metrics) observeError() {
	if m != nil {
		m.errors.Inc()
	}
}

// methodLabel is the method label of a request: its method if HTTP defines it, else
// "other", since a client may send any token as a method, and one series each would let it
// grow the registry without bound.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}
