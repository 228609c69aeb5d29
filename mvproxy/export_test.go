package mvproxy

import "github.com/kplug/kplug/mvproxy/discovery"

// ObserveAll records one sample in each of m's metrics that the Handler records itself.
func ObserveAll(m *Metrics) {
	m.reroutedRequest("200", discovery.GVR{Group: "batch", Version: "v1", Resource: "jobs"})
	m.mergedCache(true)
	m.mergedCache(false)
	m.localDiscoveryRequest()
}
