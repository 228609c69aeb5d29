package load

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kplug/kplug/test/e2e/traffic"
)

// FaultResult is what one fault did to the traffic, and what of it was wrong.
type FaultResult struct {
	Name string
	// Start and End bound the fault on the traffic's clock: from its injection until the
	// traffic was served again.
	Start, End time.Duration
	// Recovery is the time from the end of the fault (a server ready again, a process
	// continued) until the traffic through the proxy was served again.
	Recovery time.Duration
	// Errors counts the failed requests in the window, by load and kind.
	Errors map[string]int
	// Requests is how many requests ended in the window.
	Requests int
	// MaxLatency is the longest request in the window.
	MaxLatency time.Duration
	Notes      []string
	Problems   []string
}

// Timing is how long faults last in a run: Hold is how long a server stays down, hung or
// resetting; Settle is how long the traffic runs after a recovery before the next fault.
type Timing struct {
	Hold, Settle time.Duration
	// RequestTimeout is the traffic's timeout per request (traffic.Options.Timeout).
	RequestTimeout time.Duration
}

// window is the samples of a fault's window, by load.
type window struct {
	tr       *traffic.Traffic
	from, to time.Duration
}

// samples returns the requests of load that were in flight during the window (sent before
// it ended, answered after it began).
func samplesIn(rep []traffic.Sample, from, to time.Duration) []traffic.Sample {
	var out []traffic.Sample
	for _, s := range rep {
		if s.At <= to && s.At+s.Took >= from {
			out = append(out, s)
		}
	}
	return out
}

// judge fills r's errors and checks the rules every fault shares, for each load's
// samples in the window: every request was answered by the proxy (no transport error but
// an answer cut short, so none hung past its timeout), and the proxy's own answers are 503
// Status objects.
// quiet names loads that must see no error at all.
func judge(r *FaultResult, samples map[string][]traffic.Sample, allowTimeouts map[string]bool, quiet ...string) {
	r.Errors = map[string]int{}
	for load, ss := range samples {
		for _, s := range ss {
			r.Requests++
			r.MaxLatency = max(r.MaxLatency, s.Took)
			if s.Outcome == traffic.OK {
				continue
			}
			r.Errors[load+": "+s.Op.String()+" "+s.Kind]++
			switch {
			case s.Kind == "transport: timeout" && allowTimeouts[load]:
			case s.Kind == "transport: HTTP/2 stream reset":
				// An answer cut in the middle of its body when the fault struck: the proxy
				// can only reset the stream (the status line is long gone).
			case strings.HasPrefix(s.Kind, "transport: "):
				r.Problems = append(r.Problems, fmt.Sprintf("%s: %s at %v got no answer from the proxy: %s", load, s.Op, s.At.Round(time.Millisecond), s.Kind))
			case strings.Contains(s.Kind, "(mvproxy:") && !strings.HasPrefix(s.Kind, "503 ServiceUnavailable"):
				r.Problems = append(r.Problems, fmt.Sprintf("%s: %s at %v: the proxy answered %s, not a 503", load, s.Op, s.At.Round(time.Millisecond), s.Kind))
			case s.Code == 404:
				r.Problems = append(r.Problems, fmt.Sprintf("%s: %s at %v: 404", load, s.Op, s.At.Round(time.Millisecond)))
			case slices.Contains(quiet, load):
				r.Problems = append(r.Problems, fmt.Sprintf("%s: %s at %v failed (%s), but this fault must not touch it", load, s.Op, s.At.Round(time.Millisecond), s.Kind))
			}
		}
	}
	r.Problems = dedupe(r.Problems)
}

// dedupe keeps the first 10 problems of each kind (the text before " at ").
func dedupe(problems []string) []string {
	seen := map[string]int{}
	var out []string
	for _, p := range problems {
		k, _, _ := strings.Cut(p, " at ")
		seen[k]++
		if seen[k] <= 10 {
			out = append(out, p)
		} else if seen[k] == 11 {
			out = append(out, k+": more of the same")
		}
	}
	return out
}

// Summary is one line for logs and the report.
func (r FaultResult) Summary() string {
	var errs []string
	for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
		errs = append(errs, fmt.Sprintf("%s ×%d", k, r.Errors[k]))
	}
	if len(errs) == 0 {
		errs = []string{"none"}
	}
	return fmt.Sprintf("%s: %d requests in %v, recovered %v after the fault ended, longest request %v; errors: %s",
		r.Name, r.Requests, (r.End - r.Start).Round(100*time.Millisecond), r.Recovery.Round(10*time.Millisecond),
		r.MaxLatency.Round(time.Millisecond), strings.Join(errs, ", "))
}

// snapshot returns the samples of the named loads so far.
type sampleSource interface {
	Samples(load string) []traffic.Sample
}

func collect(src sampleSource, from, to time.Duration, loads ...string) map[string][]traffic.Sample {
	out := map[string][]traffic.Sample{}
	for _, l := range loads {
		out[l] = samplesIn(src.Samples(l), from, to)
	}
	return out
}

// until polls f every 100 ms until it succeeds (then it returns how long that took) or
// within passes.
func until(ctx context.Context, within time.Duration, f func() error) (time.Duration, error) {
	start := time.Now()
	err := Eventually(ctx, within, f)
	return time.Since(start), err
}
