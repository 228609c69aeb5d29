package imagecred

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names. The first three are the kubelet's (errors with the _total suffix of
// Kubernetes after the promlint audit); the cache counters are kplug's own.
const (
	MetricPluginErrors   = "kubelet_credential_provider_plugin_errors_total"
	MetricPluginDuration = "kubelet_credential_provider_plugin_duration"
	MetricConfigInfo     = "kubelet_credential_provider_config_info"
	MetricCacheHits      = "kplug_image_credential_cache_hits_total"
	MetricCacheMisses    = "kplug_image_credential_cache_misses_total"
)

type metrics struct {
	errors     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	configInfo *prometheus.GaugeVec
	hits       *prometheus.CounterVec
	misses     *prometheus.CounterVec
}

// newMetrics registers the collectors on reg (nil: they are kept but not exported). When
// reg already has them, for example from another Keyring, those are shared.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPluginErrors, Help: "Number of errors from credential provider plugin",
		}, []string{"plugin_name"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricPluginDuration, Help: "Duration of execution in seconds for credential provider plugin",
			Buckets: prometheus.DefBuckets,
		}, []string{"plugin_name"}),
		configInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricConfigInfo, Help: "Information about the last applied credential provider configuration with hash as label",
		}, []string{"hash"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCacheHits, Help: "Lookups answered from the credential cache, by provider",
		}, []string{"plugin_name"}),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCacheMisses, Help: "Lookups the credential cache could not answer, by provider",
		}, []string{"plugin_name"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.errors, err = register(reg, m.errors)
	if err == nil {
		m.duration, err = register(reg, m.duration)
	}
	if err == nil {
		m.configInfo, err = register(reg, m.configInfo)
	}
	if err == nil {
		m.hits, err = register(reg, m.hits)
	}
	if err == nil {
		m.misses, err = register(reg, m.misses)
	}
	return m, err
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// setConfigHash shows only the latest hash, as the kubelet's collector does.
func (m *metrics) setConfigHash(hash string) {
	m.configInfo.Reset()
	m.configInfo.WithLabelValues(hash).Set(1)
}

// providerMetrics are one provider's series, resolved once.
type providerMetrics struct {
	errors, hits, misses prometheus.Counter
	duration             prometheus.Observer
}

func (m *metrics) forProvider(name string) providerMetrics {
	return providerMetrics{
		errors:   m.errors.WithLabelValues(name),
		hits:     m.hits.WithLabelValues(name),
		misses:   m.misses.WithLabelValues(name),
		duration: m.duration.WithLabelValues(name),
	}
}
