package imagecred

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/metrics"
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

// Metrics are the image credential metrics, labelled by provider name (plugin_name). Plugin
// observes every plugin run, WithCache counts hits and misses, and New records the config
// hash. A nil *Metrics records nothing. Safe for concurrent use.
type Metrics struct {
	errors     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	configInfo *prometheus.GaugeVec
	hits       *prometheus.CounterVec
	misses     *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them on reg; nil keeps them unexported.
// When reg already holds them (another Keyring registered them), the series are shared.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
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
	for _, err := range []error{
		metrics.Register(reg, &m.errors), metrics.Register(reg, &m.duration), metrics.Register(reg, &m.configInfo),
		metrics.Register(reg, &m.hits), metrics.Register(reg, &m.misses),
	} {
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

// SetConfigHash records the hash of the configuration in use (Config.Hash). Only the
// latest is shown, as the kubelet's collector does.
func (m *Metrics) SetConfigHash(hash string) {
	if m == nil {
		return
	}
	m.configInfo.Reset()
	m.configInfo.WithLabelValues(hash).Set(1)
}

// providerMetrics are one provider's series, resolved once; the zero value records nothing.
// Provider names come from the configuration, a bounded set.
type providerMetrics struct {
	errors, hits, misses prometheus.Counter
	duration             prometheus.Observer
}

func (m *Metrics) provider(name string) providerMetrics {
	if m == nil {
		return providerMetrics{}
	}
	return providerMetrics{
		errors:   m.errors.WithLabelValues(name),
		hits:     m.hits.WithLabelValues(name),
		misses:   m.misses.WithLabelValues(name),
		duration: m.duration.WithLabelValues(name),
	}
}

// observeRun is the execplugin.Runner observer. Like the kubelet, it times every run and
// counts the failures of the run itself (exit, timeout, start), not a caller's
// cancellation nor an answer that does not decode.
func (pm providerMetrics) observeRun(c execplugin.Call) {
	pm.duration.Observe(c.Duration.Seconds())
	if c.Status != execplugin.StatusOK && c.Status != execplugin.StatusCanceled {
		pm.errors.Inc()
	}
}

func (pm providerMetrics) hit() {
	if pm.hits != nil {
		pm.hits.Inc()
	}
}

func (pm providerMetrics) miss() {
	if pm.misses != nil {
		pm.misses.Inc()
	}
}
