// Package metrics holds kplug's one metrics convention, so that every mechanism exposes
// Prometheus metrics the same way:
//
//   - A mechanism that records metrics exports a Metrics type and
//     NewMetrics(reg prometheus.Registerer) (*Metrics, error), which creates its collectors
//     and registers each with Register. A nil reg keeps them unexported (tests, or metrics
//     turned off); nothing is ever registered globally.
//   - Components take a *Metrics in their options; nil records nothing. Metrics are fed by
//     an observer at the edge of the pipeline (a wrapper or a hook such as
//     execplugin.Runner.Observe), never by fields of a source or provider.
//   - Label values come from bounded sets (configuration, discovery), never from what a
//     client sends; a value that could grow is capped with Label.
package metrics

import (
	"errors"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers *c on reg. If reg already holds an equal collector (another instance
// of the same component registered it), *c is replaced by that one, so that instances
// share their series instead of failing. A nil reg registers nothing.
func Register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	if reg == nil {
		return nil
	}
	err := reg.Register(*c)
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}

// MaxLabelLength caps label values taken from bounded but long sources: the longest API
// group name Kubernetes allows (a DNS subdomain).
const MaxLabelLength = 253

// Label returns v cut to at most MaxLabelLength bytes, at a rune boundary: client_golang
// panics on a label value that is not valid UTF-8, and a cut inside a multi-byte rune
// would make one.
func Label(v string) string {
	if len(v) <= MaxLabelLength {
		return v
	}
	cut := MaxLabelLength
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut]
}
