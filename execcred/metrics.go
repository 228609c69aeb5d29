package execcred

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplug/kplug/execplugin"
)

// Metrics records client-go's exec plugin metrics, with client-go's names, labels and
// label values. One Metrics can serve many Authenticators. It is safe for concurrent use.
type Metrics struct {
	calls    *prometheus.CounterVec
	rotation prometheus.Histogram
	ttl      prometheus.GaugeFunc
	proxies  prometheus.Counter

	mu       sync.Mutex
	notAfter map[*Authenticator]time.Time // current leaf expiry of each authenticator with a certificate
	now      func() time.Time
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rest_client_exec_plugin_call_total",
			Help: "Number of calls to an exec plugin, partitioned by the type of event encountered (no_error, plugin_execution_error, plugin_not_found_error, client_internal_error) and an optional exit code.",
		}, []string{"code", "call_status"}),
		rotation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rest_client_exec_plugin_certificate_rotation_age",
			Help:    "Histogram of the number of seconds the last auth exec plugin client certificate lived before being rotated.",
			Buckets: []float64{600, 1800, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000},
		}),
		proxies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rest_client_exec_plugin_with_proxy_call_total",
			Help: "Number of exec plugin calls that answered with an exec proxy (KEP-2718).",
		}),
		notAfter: map[*Authenticator]time.Time{},
		now:      time.Now,
	}
	m.ttl = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rest_client_exec_plugin_ttl_seconds",
		Help: "Gauge of the shortest TTL (time-to-live) of the client certificate(s) managed by the auth exec plugin. The value is in seconds until certificate expiry (negative if already expired). If auth exec plugins are unused or manage no TLS certificates, the value will be +INF.",
	}, m.ttlSeconds)
	for _, c := range []prometheus.Collector{m.calls, m.rotation, m.ttl, m.proxies} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Label values of call_status.
const (
	statusNoError        = "no_error"
	statusExecutionError = "plugin_execution_error"
	statusNotFound       = "plugin_not_found_error"
	statusInternalError  = "client_internal_error"
)

// observeCall maps a run to client-go's labels. Unlike client-go, a missing file is
// plugin_not_found_error but E2BIG is client_internal_error, and a timeout or kill is a
// plugin_execution_error with code -1.
func (m *Metrics) observeCall(c execplugin.Call) {
	code, status := "1", statusInternalError
	switch c.Status {
	case execplugin.StatusOK:
		code, status = "0", statusNoError
	case execplugin.StatusNotFound, execplugin.StatusNotExecutable:
		status = statusNotFound
	case execplugin.StatusExitError, execplugin.StatusTimeout, execplugin.StatusCanceled,
		execplugin.StatusOutputTooLarge, execplugin.StatusOutputHeld:
		code, status = strconv.Itoa(c.ExitCode), statusExecutionError
	}
	m.calls.WithLabelValues(code, status).Inc()
}

func (m *Metrics) credentialChanged(a *Authenticator, old, cur *Credential, rotated bool, now time.Time) {
	if cur.Proxy != nil {
		m.proxies.Inc()
	}
	if rotated && old.Certificate != nil {
		m.rotation.Observe(now.Sub(old.Certificate.Leaf.NotBefore).Seconds())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur.Certificate != nil {
		m.notAfter[a] = cur.Certificate.Leaf.NotAfter
	} else {
		delete(m.notAfter, a)
	}
}

func (m *Metrics) ttlSeconds() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	ttl := math.Inf(1)
	for _, t := range m.notAfter {
		ttl = math.Min(ttl, t.Sub(m.now()).Seconds())
	}
	return ttl
}
