package server

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics records the proxy side: requests by method and code, errors reaching the API
// server, and latency. A nil *Metrics records nothing.
type Metrics struct {
	requests *prometheus.CounterVec
	errors   prometheus.Counter
	latency  *prometheus.HistogramVec
}

// NewMetrics registers the proxy metrics with reg.
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
	for _, c := range []prometheus.Collector{m.requests, m.errors, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(method string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(method, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(method).Observe(d.Seconds())
}

func (m *Metrics) observeError() {
	if m != nil {
		m.errors.Inc()
	}
}
