package verifier

import (
	"errors"
	"fmt"

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
	}
	if err := errors.Join(metrics.Register(reg, &m.outcomes), metrics.Register(reg, &m.unclaimed), metrics.Register(reg, &m.cache)); err != nil {
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
