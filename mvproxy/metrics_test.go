package mvproxy_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// The metrics carry kube-apiserver's names, types and label names (v1.36.3,
// staging/src/k8s.io/apiserver/pkg/util/peerproxy/metrics and
// .../endpoints/discovery/aggregated/metrics.go), so that one dashboard reads both.
func TestMetricsNamedAsUpstream(t *testing.T) {
	t.Parallel()
	upstream := map[string]string{ // name: type and sorted label names
		"apiserver_rerouted_request_total":                        "COUNTER code,group,resource,version",
		"apiserver_peer_proxy_errors_total":                       "COUNTER group,resource,type,version",
		"apiserver_peer_discovery_sync_errors_total":              "COUNTER type",
		"aggregator_discovery_peer_aggregated_cache_hits_total":   "COUNTER ",
		"aggregator_discovery_peer_aggregated_cache_misses_total": "COUNTER ",
		"aggregator_discovery_nopeer_requests_total":              "COUNTER ",
	}
	reg := prometheus.NewPedanticRegistry()
	m, err := mvproxy.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// One sample of each, so that vectors show their labels.
	m.ProxyError(mvproxy.ErrorPeerUnreachable, discovery.GVR{Group: "batch", Version: "v1", Resource: "jobs"})
	m.DiscoverySyncError(mvproxy.SyncErrorFetchDiscovery)
	mvproxy.ObserveAll(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range families {
		var labels []string
		if len(f.GetMetric()) > 0 {
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		slices.Sort(labels)
		got[f.GetName()] = dto.MetricType_name[int32(f.GetType())] + " " + strings.Join(labels, ",")
	}
	for _, name := range slices.Sorted(maps.Keys(upstream)) {
		if got[name] != upstream[name] {
			t.Errorf("%s: %q, upstream %q", name, got[name], upstream[name])
		}
	}
	for name := range got {
		if _, ok := upstream[name]; !ok {
			t.Errorf("%s is not a metric kube-apiserver has", name)
		}
	}
}
