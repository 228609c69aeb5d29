package verifier

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/metrics"
)

// Metrics are the verifier's Prometheus metrics, named after KEP-6308 "Metrics" under
// kplug_httpsig_ instead of apiserver_httpsig_. Label values come from the configuration
// (authenticator names) and from the fixed outcome and reason sets, never from a request.
// A nil *Metrics records nothing; it is safe for concurrent use.
type Metrics struct {
	outcomes  *prometheus.CounterVec
	unclaimed *prometheus.CounterVec
	cache     *prometheus.CounterVec
	// Of resolver authenticators, labelled by authenticator name ("resolver").
	calls      *prometheus.CounterVec
	durations  *prometheus.HistogramVec
	metadataAt *prometheus.GaugeVec
	keyCache   *prometheus.CounterVec
	derivation *prometheus.GaugeVec
	nonces     *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg; a nil reg registers nothing.
// A second NewMetrics on the same reg shares the first one's series, so a reloaded
// configuration keeps counting where the previous one stopped.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplug_httpsig_signature_outcomes_total",
			Help: "Signatures an authenticator claimed, by authenticator and outcome (accepted, forged, stale, required, certificate or user rule refused, ...).",
		}, []string{"authenticator", "outcome"}),
		unclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplug_httpsig_unclaimed_signatures_total",
			Help: "Signed requests no authenticator claimed, by reason.",
		}, []string{"reason"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplug_httpsig_certificate_validation_cache_lookups_total",
			Help: "Lookups of validated certificates, by authenticator and result (hit, miss).",
		}, []string{"authenticator", "result"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplug_httpsig_resolver_request_total",
			Help: "Calls to resolvers, by resolver (authenticator name), method and gRPC code.",
		}, []string{"resolver", "method", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kplug_httpsig_resolver_request_duration_seconds",
			Help:    "Time of calls to resolvers, by resolver and method.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		}, []string{"resolver", "method"}),
		metadataAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kplug_httpsig_resolver_metadata_success_timestamp",
			Help: "Unix time of a resolver's last successful Metadata call: its health.",
		}, []string{"resolver"}),
		keyCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplug_httpsig_key_cache_lookup_total",
			Help: "Lookups of resolved keys, by resolver and result (hit, negative_hit, miss).",
		}, []string{"resolver", "result"}),
		derivation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kplug_httpsig_resolver_key_derivation_info",
			Help: "1 for the SHA-256 of the key derivation ladder a resolver states (\"\" for none).",
		}, []string{"resolver", "sha256"}),
		nonces: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kplug_httpsig_resolver_nonce_tracking",
			Help: "1 when a resolver authenticator records nonces (nonceHandling Consume), 0 when replay protection is off (Ignore).",
		}, []string{"resolver"}),
	}
	if err := errors.Join(metrics.Register(reg, &m.outcomes), metrics.Register(reg, &m.unclaimed), metrics.Register(reg, &m.cache),
		metrics.Register(reg, &m.calls), metrics.Register(reg, &m.durations), metrics.Register(reg, &m.metadataAt),
		metrics.Register(reg, &m.keyCache), metrics.Register(reg, &m.derivation), metrics.Register(reg, &m.nonces)); err != nil {
		return nil, fmt.Errorf("verifier: registering metrics: %w", err)
	}
	return m, nil
}

func (m *Metrics) outcome(authenticator string, o httpsig.Outcome) {
	if m != nil {
		m.outcomes.WithLabelValues(authenticator, string(o)).Inc()
	}
}

func (m *Metrics) unclaimedSignature(reason httpsig.Outcome) {
	if m != nil {
		m.unclaimed.WithLabelValues(string(reason)).Inc()
	}
}

func (m *Metrics) cacheLookup(authenticator string, hit bool) {
	if m == nil {
		return
	}
	result := "miss"
	if hit {
		result = "hit"
	}
	m.cache.WithLabelValues(authenticator, result).Inc()
}

func (m *Metrics) resolverCall(resolver, method, code string, took time.Duration) {
	if m != nil {
		m.calls.WithLabelValues(resolver, method, code).Inc()
		m.durations.WithLabelValues(resolver, method).Observe(took.Seconds())
	}
}

func (m *Metrics) metadataSuccess(resolver string, at time.Time, ladder string) {
	if m != nil {
		m.metadataAt.WithLabelValues(resolver).Set(float64(at.Unix()))
		m.derivation.DeletePartialMatch(prometheus.Labels{"resolver": resolver})
		m.derivation.WithLabelValues(resolver, ladder).Set(1)
	}
}

func (m *Metrics) keyCacheLookup(resolver, result string) {
	if m != nil {
		m.keyCache.WithLabelValues(resolver, result).Inc()
	}
}

func (m *Metrics) nonceTracking(resolver string, on bool) {
	if m != nil {
		v := 0.0
		if on {
			v = 1
		}
		m.nonces.WithLabelValues(resolver).Set(v)
	}
}
