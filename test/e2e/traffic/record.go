package traffic

import (
	"slices"
	"sync"
	"time"
)

// Op is a kind of request.
type Op uint8

// The requests of a load; probes are the lists of ExpectServed.
const (
	opGet Op = iota
	opList
	opCreate
	opUpdate
	opDelete
	opProbe
)

var opNames = [...]string{"GET", "LIST", "CREATE", "UPDATE", "DELETE", "probe"}

func (o Op) String() string { return opNames[o] }

// Sample is one request: when it was sent (since the workers started), how long its
// answer took, what it was and what it was told; Kind names an error ("" for OK).
type Sample struct {
	At, Took time.Duration
	Op       Op
	Outcome  Outcome
	Code     int
	Kind     string
}

type recorder struct {
	mu      sync.Mutex
	samples []Sample
	kinds   map[string]string // interned error kinds
	late    int
}

func newRecorder() *recorder { return &recorder{kinds: map[string]string{}} }

func (r *recorder) add(at time.Duration, op Op, res result) {
	s := Sample{At: at, Took: res.took, Op: op, Outcome: res.outcome(), Code: res.code}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.Outcome != OK {
		k := res.kind()
		if interned, ok := r.kinds[k]; ok {
			k = interned
		} else {
			r.kinds[k] = k
		}
		s.Kind = k
	}
	r.samples = append(r.samples, s)
}

func (r *recorder) missed(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.late += n
}

func (r *recorder) snapshot() ([]Sample, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.samples), r.late
}

// Percentiles of request latency.
type Percentiles struct {
	N              int
	P50, P99, P999 time.Duration
	Max            time.Duration
}

// LatencyOf returns the percentiles of the samples' latency, of those keep accepts.
func LatencyOf(samples []Sample, keep func(Sample) bool) Percentiles {
	var d []time.Duration
	for _, s := range samples {
		if keep == nil || keep(s) {
			d = append(d, s.Took)
		}
	}
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(d))+0.5) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return Percentiles{N: len(d), P50: at(0.50), P99: at(0.99), P999: at(0.999), Max: d[len(d)-1]}
}

// OKOnly keeps the samples of requests that succeeded.
func OKOnly(s Sample) bool { return s.Outcome == OK }
