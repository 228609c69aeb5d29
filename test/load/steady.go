package load

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/test/e2e/traffic"
)

// LongOptions configure the long form (make load).
type LongOptions struct {
	// Steady is how long each proxy's steady load runs, side by side with the direct path.
	Steady time.Duration
	// Faults is the timing of the faults after it.
	Faults Timing
	// Artifacts is where profiles are kept.
	Artifacts string
	Logf      func(string, ...any)
}

// Scenario is one proxy's long run: the steady load side by side with the direct path,
// then the faults under the same traffic, then the traffic's checks.
type Scenario struct {
	Name   string
	Steady time.Duration
	// Loads are the steady window's figures, by load.
	Loads []Stats
	// Pairs compare each proxied load with the same load sent straight to the apiserver.
	Pairs []Pair
	// Procs are the processes' series, by name, over the whole run.
	Procs     map[string][]ProcSample
	ProcOrder []string
	// Proxies name the processes whose flatness and memory are judged.
	Proxies []string
	Faults  []FaultResult
	// Checks are the traffic check's problems over the whole run; Watches its watch
	// figures by load.
	Checks  []string
	Watches map[string]traffic.WatchReport
	Targets []TargetResult
	// Profile is the proxy's CPU profile in the middle of the steady load (pprof -top).
	Profile string
	// Memory is where the proxy's memory went at the end of that profile: RSS by kind,
	// the Go runtime's account of it, and the heap profile's top.
	Memory string
	// Series are each load's figures over time.
	Series map[string][]Point
	// FaultsAt is when the faults began, on the traffic's clock.
	FaultsAt time.Duration
}

// Stats are one load's figures over the steady window.
type Stats struct {
	Name, Target, Resource string
	AskedRate, Rate        float64
	Requests, OK, Late     int
	Errors                 map[string]int
	Latency                traffic.Percentiles
	ByOp                   map[string]traffic.Percentiles
	Watches, WebSocket     int
}

// Pair compares a proxied load with its direct twin.
type Pair struct {
	What                  string
	Proxied, Direct       string
	P99Proxied, P99Direct time.Duration
	// Asked is the rate both were asked for; RateProxied and RateDirect what they sent
	// (requests/s over the steady window; a worker whose request is slow falls behind).
	Asked, RateProxied, RateDirect float64
	// ExtraErrors are the proxied load's errors whose kind the direct load never had.
	ExtraErrors map[string]int
}

// Point is a load's figures in one interval.
type Point struct {
	At              time.Duration
	OKRate, ErrRate float64
	P50, P99        time.Duration
}

// TargetResult is one target of the issue, and whether the run met it.
type TargetResult struct {
	Target, Measured string
	Met              bool
}

const seriesStep = 10 * time.Second

// steadyStats are l's figures over the requests answered before until (when the faults
// began): a request in flight then is the faults'.
func steadyStats(l *traffic.LoadReport, until time.Duration) Stats {
	var ss []traffic.Sample
	for _, s := range l.Samples {
		if s.At+s.Took < until {
			ss = append(ss, s)
		}
	}
	st := Stats{Name: l.Name, Target: l.Target, Resource: l.Resource, AskedRate: l.Rate, Errors: map[string]int{}, ByOp: map[string]traffic.Percentiles{},
		Watches: l.Watches.Watches - l.Watches.WebSocket, WebSocket: l.Watches.WebSocket, Late: l.Late}
	for _, s := range ss {
		st.Requests++
		if s.Outcome == traffic.OK {
			st.OK++
		} else {
			st.Errors[s.Op.String()+" "+s.Kind]++
		}
	}
	st.Rate = float64(st.Requests) / until.Seconds()
	st.Latency = traffic.LatencyOf(ss, traffic.OKOnly)
	for op := range slices.Values([]string{"GET", "LIST", "CREATE", "UPDATE", "DELETE"}) {
		if p := traffic.LatencyOf(ss, func(s traffic.Sample) bool { return s.Outcome == traffic.OK && s.Op.String() == op }); p.N > 0 {
			st.ByOp[op] = p
		}
	}
	return st
}

func series(l *traffic.LoadReport, until time.Duration) []Point {
	var pts []Point
	for from := time.Duration(0); from < until; from += seriesStep {
		to := from + seriesStep
		var in []traffic.Sample
		errs := 0
		for _, s := range l.Samples {
			if s.At >= from && s.At < to {
				in = append(in, s)
				if s.Outcome != traffic.OK {
					errs++
				}
			}
		}
		p := traffic.LatencyOf(in, traffic.OKOnly)
		pts = append(pts, Point{At: to, OKRate: float64(len(in)-errs) / seriesStep.Seconds(), ErrRate: float64(errs) / seriesStep.Seconds(), P50: p.P50, P99: p.P99})
	}
	return pts
}

func pair(what string, proxied, direct Stats) Pair {
	p := Pair{What: what, Proxied: proxied.Name, Direct: direct.Name, P99Proxied: proxied.Latency.P99, P99Direct: direct.Latency.P99, ExtraErrors: map[string]int{},
		Asked: proxied.AskedRate, RateProxied: proxied.Rate, RateDirect: direct.Rate}
	kinds := map[string]bool{}
	for k := range direct.Errors {
		kinds[kindOf(k)] = true
	}
	for k, n := range proxied.Errors {
		if !kinds[kindOf(k)] {
			p.ExtraErrors[k] = n
		}
	}
	return p
}

// kindOf is an error's kind without its request ("LIST 503 ..." → "503 ...").
func kindOf(k string) string {
	_, kind, _ := strings.Cut(k, " ")
	return kind
}

// judgeTargets checks the targets on a scenario: errors only where the direct path
// has them, p99 within 2× the direct path's, memory and goroutines flat over the last 5
// minutes of the steady load (the last half when it is shorter than 10 minutes), and,
// when maxRSS > 0, the proxy's memory under it.
func (sc *Scenario) judgeTargets(maxRSS int64) {
	for _, p := range sc.Pairs {
		n := 0
		for _, c := range p.ExtraErrors {
			n += c
		}
		sc.Targets = append(sc.Targets, TargetResult{
			Target:   p.What + ": no error the direct path does not show",
			Measured: fmt.Sprintf("%d (%s)", n, describeErrors(p.ExtraErrors)),
			Met:      n == 0,
		})
		ratio := float64(p.P99Proxied) / float64(max(p.P99Direct, 1))
		sc.Targets = append(sc.Targets, TargetResult{
			Target:   p.What + ": p99 within 2× the direct path's",
			Measured: fmt.Sprintf("%v vs %v direct: %.2f×", p.P99Proxied.Round(100*time.Microsecond), p.P99Direct.Round(100*time.Microsecond), ratio),
			Met:      ratio <= 2,
		})
	}
	var asked, sent, direct float64
	for _, p := range sc.Pairs {
		asked, sent, direct = asked+p.Asked, sent+p.RateProxied, direct+p.RateDirect
	}
	sc.Targets = append(sc.Targets, TargetResult{
		Target:   fmt.Sprintf("%.0f requests/s sustained through the proxy", asked),
		Measured: fmt.Sprintf("%.1f/s (%.0f%%); the direct path, asked the same: %.1f/s (%.0f%%)", sent, 100*sent/asked, direct, 100*direct/asked),
		Met:      sent >= 0.98*asked,
	})
	window := min(5*time.Minute, sc.Steady/2)
	for _, name := range sc.Proxies {
		rss, gor := flatness(sc.Procs[name], sc.Steady-window, sc.Steady)
		sc.Targets = append(sc.Targets,
			TargetResult{Target: name + ": RSS flat over the last " + window.String() + " of the steady load", Measured: rss.String(), Met: rss.flat},
			TargetResult{Target: name + ": goroutines flat over the last " + window.String(), Measured: gor.String(), Met: gor.flat})
		if maxRSS > 0 {
			peak, anon := int64(0), int64(0)
			for _, s := range sc.Procs[name] {
				if s.At <= sc.Steady {
					peak, anon = max(peak, s.RSS), max(anon, s.Anon)
				}
			}
			sc.Targets = append(sc.Targets, TargetResult{
				Target:   fmt.Sprintf("%s: RSS under %d MiB", name, maxRSS>>20),
				Measured: fmt.Sprintf("peak %s (anonymous: peak %s)", inMiB(peak), inMiB(anon)),
				Met:      peak > 0 && peak < maxRSS,
			})
		}
	}
}

func describeErrors(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return strings.Join(out, ", ")
}

// trend compares the mean of a value's first and last minute of a window.
type trend struct {
	what        string
	first, last float64
	flat        bool
}

func (t trend) String() string {
	if t.first == 0 {
		return "no samples"
	}
	return fmt.Sprintf("%s %.1f → %.1f (%+.1f%%)", t.what, t.first, t.last, 100*(t.last-t.first)/t.first)
}

// flatness: memory is flat when its last minute's mean is within 10% of the window's
// first minute's; goroutines within 10% plus 20 (watches resuming come and go).
func flatness(ps []ProcSample, from, to time.Duration) (rss, gor trend) {
	mean := func(f func(ProcSample) float64, a, b time.Duration) float64 {
		sum, n := 0.0, 0
		for _, s := range ps {
			if s.At >= a && s.At < b {
				sum += f(s)
				n++
			}
		}
		if n == 0 {
			return 0
		}
		return sum / float64(n)
	}
	mib := func(s ProcSample) float64 { return float64(s.RSS) / (1 << 20) }
	g := func(s ProcSample) float64 { return float64(s.Goroutines) }
	rss = trend{what: "MiB", first: mean(mib, from, from+time.Minute), last: mean(mib, to-time.Minute, to)}
	rss.flat = rss.first > 0 && rss.last <= rss.first*1.10
	gor = trend{what: "goroutines", first: mean(g, from, from+time.Minute), last: mean(g, to-time.Minute, to)}
	gor.flat = gor.first > 0 && gor.last <= gor.first*1.10+20
	return rss, gor
}

// profileTop takes a CPU profile of process pid over d and returns pprof's top functions.
func profileTop(ctx context.Context, pprofDir string, pid int, d time.Duration, dir, name string) string {
	if err := Profile(ctx, pprofDir, pid, d, dir, name); err != nil {
		return "no profile: " + err.Error()
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", filepath.Join(dir, name+".cpu.pprof")).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("go tool pprof: %v: %s", err, out)
	}
	return string(out)
}

// memoryOf says where process pid's resident memory goes: the kernel's split of RSS, the
// Go runtime's MemStats (from pprof's heap page) and the top of the heap profile that
// Profile saved as dir/<name>.heap.pprof.
func memoryOf(ctx context.Context, pprofDir string, pid int, dir, name string) string {
	ps, err := Measure(ctx, pid, "")
	if err != nil {
		return "no memory figures: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "RSS %s: anonymous (heap, stacks, runtime) %s, the rest file-backed (the executable's pages)\n", inMiB(ps.RSS), inMiB(ps.Anon))
	if addr, err := PprofAddr(pprofDir, pid); err == nil {
		if page, err := fetch(ctx, "http://"+addr+"/debug/pprof/heap?debug=1", time.Minute); err == nil {
			b.WriteString(goMemStats(page))
		}
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-sample_index=inuse_space", "-nodecount=12", filepath.Join(dir, name+".heap.pprof")).CombinedOutput()
	if err != nil {
		return b.String() + fmt.Sprintf("go tool pprof: %v: %s", err, out)
	}
	return b.String() + "\n" + string(out)
}

// goMemStats picks the Go runtime's memory figures out of pprof's heap page (debug=1),
// whose last lines are runtime.MemStats as "# Name = value".
func goMemStats(page []byte) string {
	v := map[string]int64{}
	for line := range strings.Lines(string(page)) {
		name, val, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "# "), " = ")
		if !ok {
			continue
		}
		// "Stack = inuse / sys" and the like: the first figure.
		first, _, _ := strings.Cut(val, " ")
		if n, err := strconv.ParseInt(first, 10, 64); err == nil {
			v[name] = n
		}
	}
	if v["Sys"] == 0 {
		return ""
	}
	return fmt.Sprintf("Go runtime: obtained from the OS %s; heap in use %s (live objects %s), heap free but not returned %s, stacks %s; next GC at a heap of %s\n",
		inMiB(v["Sys"]), inMiB(v["HeapInuse"]), inMiB(v["HeapAlloc"]), inMiB(v["HeapIdle"]-v["HeapReleased"]), inMiB(v["Stack"]), inMiB(v["NextGC"]))
}

// inMiB writes n bytes in MiB, to a tenth.
func inMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// waitSteady waits until tr has run for o.Steady, logging its progress, and takes the
// proxy's profile (profile) in the middle; it returns the profile.
func waitSteady(o LongOptions, tr *traffic.Traffic, profile func() string) string {
	time.Sleep(max(o.Steady/2-15*time.Second-tr.Since(), 0))
	prof := profile()
	for tr.Since() < o.Steady {
		time.Sleep(min(30*time.Second, o.Steady-tr.Since()))
		o.Logf("steady load: %v of %v", tr.Since().Round(time.Second), o.Steady)
	}
	return prof
}

// keepSampling samples every 5 s until the returned function is called.
func keepSampling(ctx context.Context, s *Sampler) func() {
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, 5*time.Second) }()
	return func() { stop(); <-done }
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}
