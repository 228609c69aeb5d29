package mvproxy

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplug/kplug/internal/metrics"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// Metrics are the mixed version proxy's Prometheus metrics, named as kube-apiserver names
// them. The Handler records requests and discovery; the sidecar records its errors with
// ProxyError. A nil *Metrics records nothing; it is safe for concurrent use.
type Metrics struct {
	rerouted       *prometheus.CounterVec
	proxyErrors    *prometheus.CounterVec
	syncErrors     *prometheus.CounterVec
	mergedHits     prometheus.Counter
	mergedMisses   prometheus.Counter
	localDiscovery prometheus.Counter
}

// Error types of apiserver_peer_proxy_errors_total.
const (
	ErrorPeerUnreachable  = "peer_unreachable"  // a connection to a capable peer failed
	ErrorLocalUnreachable = "local_unreachable" // the local apiserver could not be reached
	ErrorUnauthenticated  = "unauthenticated"   // a client certificate that no CA vouches for
)

// Error types of apiserver_peer_discovery_sync_errors_total, kube-apiserver's names.
const (
	// SyncErrorFetchDiscovery: a peer's discovery could not be fetched or read.
	SyncErrorFetchDiscovery = "fetch_discovery"
	// SyncErrorHostPortResolution: a peer's Lease names no usable address.
	SyncErrorHostPortResolution = "hostport_resolution"
)

// NewMetrics creates the metrics and registers them with reg; a nil reg registers nothing.
// A second NewMetrics on the same reg shares the first one's series.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		rerouted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_rerouted_request_total",
			Help: "Total number of requests that were proxied to a peer because the local apiserver was not capable of serving it, by status code and the requested group, version and resource.",
		}, []string{"code", "group", "version", "resource"}),
		proxyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_peer_proxy_errors_total",
			Help: "Total number of errors encountered while proxying requests to a peer or the local apiserver, by type.",
		}, []string{"type", "group", "version", "resource"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_peer_discovery_sync_errors_total",
			Help: "Total number of errors encountered while reading a peer's address or discovery, by type.",
		}, []string{"type"}),
		mergedHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_discovery_peer_aggregated_cache_hits_total",
			Help: "Total number of peer-aggregated discovery requests served from the cached merge.",
		}),
		mergedMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_discovery_peer_aggregated_cache_misses_total",
			Help: "Total number of peer-aggregated discovery requests that merged the documents anew.",
		}),
		localDiscovery: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_discovery_nopeer_requests_total",
			Help: "Total number of aggregated discovery requests for the local document (profile=nopeer), as kube-apiserver counts them under this name.",
		}),
	}
	if err := errors.Join(
		metrics.Register(reg, &m.rerouted), metrics.Register(reg, &m.proxyErrors), metrics.Register(reg, &m.syncErrors),
		metrics.Register(reg, &m.mergedHits), metrics.Register(reg, &m.mergedMisses), metrics.Register(reg, &m.localDiscovery),
	); err != nil {
		return nil, fmt.Errorf("mvproxy: registering metrics: %w", err)
	}
	return m, nil
}

// otherResource labels a request for a resource no server's discovery lists: such paths
// are the client's to choose, and one series each would let anyone grow the registry
// without bound. No API group is named "other" (a CRD's group holds a dot).
var otherResource = discovery.GVR{Group: "other", Version: "other", Resource: "other"}

// ProxyError counts an error of type typ (one of the Error constants) in
// apiserver_peer_proxy_errors_total. g is the resource concerned, GVR{} for none; it must
// name a resource some server's discovery lists (see Directory.MetricLabels), never one a
// client named unchecked. Label values are capped at 253 bytes, the longest API group
// name.
func (m *Metrics) ProxyError(typ string, g discovery.GVR) {
	if m != nil {
		m.proxyErrors.WithLabelValues(typ, metrics.Label(g.Group), metrics.Label(g.Version), metrics.Label(g.Resource)).Inc()
	}
}

// DiscoverySyncError counts an error of type typ (one of the SyncError constants) in
// apiserver_peer_discovery_sync_errors_total.
func (m *Metrics) DiscoverySyncError(typ string) {
	if m != nil {
		m.syncErrors.WithLabelValues(typ).Inc()
	}
}

func (m *Metrics) reroutedRequest(code string, g discovery.GVR) {
	if m != nil {
		m.rerouted.WithLabelValues(code, metrics.Label(g.Group), metrics.Label(g.Version), metrics.Label(g.Resource)).Inc()
	}
}

// mergedCache suits discovery.MergedHandler.Observe.
func (m *Metrics) mergedCache(hit bool) {
	switch {
	case m == nil:
	case hit:
		m.mergedHits.Inc()
	default:
		m.mergedMisses.Inc()
	}
}

func (m *Metrics) localDiscoveryRequest() {
	if m != nil {
		m.localDiscovery.Inc()
	}
}
