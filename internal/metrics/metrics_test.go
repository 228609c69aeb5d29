package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "kplug_test_total", Help: "a test counter"}
	a, b := prometheus.NewCounter(opts), prometheus.NewCounter(opts)
	if err := Register(reg, &a); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg, &b); err != nil {
		t.Fatal(err)
	}
	b.Inc()
	if a != b {
		t.Error("the second instance did not share the registered counter")
	}
	clash := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kplug_test_total", Help: "a test counter"})
	if err := Register(reg, &clash); err == nil {
		t.Error("a gauge registered over a counter of the same name")
	}
	if err := Register(nil, &clash); err != nil {
		t.Errorf("nil registry: %v", err)
	}
	if got := Label(strings.Repeat("a", 300)); len(got) != MaxLabelLength {
		t.Errorf("Label kept %d bytes", len(got))
	}
}
