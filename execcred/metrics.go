package execcred

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/metrics"
)

// Metrics records client-go's exec plugin metrics, with client-go's names, labels and
// label values, as an observer at the edges of the pipeline: ObserveCall is the runner's
// hook (one count per plugin run, with its exit code), ObservePolicy the PluginOptions' hook (one
// count per policy check), and ObserveCredentials wraps a source to see each new
// credential (certificate expiry and rotation, exec proxies). One Metrics can serve many
// pipelines. It is safe for concurrent use.
type Metrics struct {
	calls    *prometheus.CounterVec
	rotation prometheus.Histogram
	ttl      prometheus.GaugeFunc
	proxies  prometheus.Counter
	policy   *prometheus.CounterVec

	mu       sync.Mutex
	notAfter map[*observed]time.Time // current leaf expiry of each observed source with a certificate
	now      func() time.Time
}

// NewMetrics creates the metrics and registers them with reg. A nil reg registers
// nothing (the metrics are recorded but not exported). Nothing is ever registered
// globally. Make one Metrics per registry and share it between pipelines: a second one on
// the same registry shares the first one's counters, but its certificate TTL is not
// exported.
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
		policy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rest_client_exec_plugin_policy_call_total",
			Help: "Number of comparisons of an exec plugin to the plugin policy and allowlist (if any), partitioned by whether or not the policy permits the plugin",
		}, []string{"status"}),
		notAfter: map[*observed]time.Time{},
		now:      time.Now,
	}
	m.ttl = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rest_client_exec_plugin_ttl_seconds",
		Help: "Gauge of the shortest TTL (time-to-live) of the client certificate(s) managed by the auth exec plugin. The value is in seconds until certificate expiry (negative if already expired). If auth exec plugins are unused or manage no TLS certificates, the value will be +INF.",
	}, m.ttlSeconds)
	for _, err := range []error{
		metrics.Register(reg, &m.calls), metrics.Register(reg, &m.rotation),
		metrics.Register(reg, &m.ttl), metrics.Register(reg, &m.proxies),
		metrics.Register(reg, &m.policy),
	} {
		if err != nil {
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

// ObserveCall counts one plugin run with client-go's labels; set it as the Observe hook
// of PluginOptions.Runner. Unlike client-go, a missing file is
// plugin_not_found_error but E2BIG is client_internal_error, and a timeout or kill is a
// plugin_execution_error with code -1.
func (m *Metrics) ObserveCall(c execplugin.Call) {
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

// ObservePolicy counts one credential plugin policy check in
// rest_client_exec_plugin_policy_call_total{status="allowed"|"denied"}; set it as the
// ObservePolicy hook of PluginOptions. client-go declares this counter but, at 1.36, never exports
// it (its label names do not match the value it passes, and it is not registered).
func (m *Metrics) ObservePolicy(allowed bool) {
	status := "denied"
	if allowed {
		status = "allowed"
	}
	m.policy.WithLabelValues(status).Inc()
}

// ObserveCredentials returns src observed: each credential it returns is a new one (put
// it below WithCache), and sets rest_client_exec_plugin_ttl_seconds from its certificate,
// observes rest_client_exec_plugin_certificate_rotation_age when the certificate changes,
// and counts exec proxy answers.
func (m *Metrics) ObserveCredentials(src Source) Source { return &observed{m: m, src: src} }

type observed struct {
	m   *Metrics
	src Source

	mu   sync.Mutex
	last *Credential
}

func (o *observed) Credential(ctx context.Context, rejected *Rejection) (*Credential, error) {
	cred, err := o.src.Credential(ctx, rejected)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	old := o.last
	o.last = cred
	o.mu.Unlock()
	o.m.credentialChanged(o, old, cred)
	return cred, nil
}

func (m *Metrics) credentialChanged(o *observed, old, cur *Credential) {
	if cur.Proxy != nil {
		m.proxies.Inc()
	}
	if old != nil && old.Certificate != nil && certChanged(old, cur) {
		m.rotation.Observe(m.now().Sub(old.Certificate.Leaf.NotBefore).Seconds())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur.Certificate != nil {
		m.notAfter[o] = cur.Certificate.Leaf.NotAfter
	} else {
		delete(m.notAfter, o)
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
