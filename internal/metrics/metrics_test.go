package metrics

import (
	"strings"
	"testing"
	"unicode/utf8"

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
}

func TestLabel(t *testing.T) {
	for _, tt := range []struct {
		name, in, want string
	}{
		{"short", "apps", "apps"},
		{"at the cap", strings.Repeat("a", MaxLabelLength), strings.Repeat("a", MaxLabelLength)},
		{"ASCII over the cap", strings.Repeat("a", 300), strings.Repeat("a", MaxLabelLength)},
		// "é" is two bytes: 126 of them end at byte 252, and the 127th would straddle the cap.
		{"two-byte runes", strings.Repeat("é", 200), strings.Repeat("é", 126)},
		// "a" and 84 "€" (three bytes each) fill the cap exactly: nothing more is cut.
		{"three-byte runes", "a" + strings.Repeat("€", 100), "a" + strings.Repeat("€", 84)},
		// "𝄞" is four bytes: 63 end at byte 252.
		{"four-byte runes", strings.Repeat("𝄞", 100), strings.Repeat("𝄞", 63)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Label(tt.in)
			if got != tt.want || len(got) > MaxLabelLength || !utf8.ValidString(got) {
				t.Errorf("Label: %d bytes (valid UTF-8: %v), want %d bytes", len(got), utf8.ValidString(got), len(tt.want))
			}
		})
	}
	// What the cut protects: client_golang panics on a label value that is not UTF-8.
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kplug_test_label_total", Help: "a test counter"}, []string{"l"})
	c.WithLabelValues(Label(strings.Repeat("é", 200))).Inc()
}
