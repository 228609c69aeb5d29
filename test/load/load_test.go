package load

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/test/e2e/traffic"
)

// short is the form of the fault scenarios `make test` runs: a few minutes in all.
var short = Timing{Hold: 4 * time.Second, Settle: 2 * time.Second, RequestTimeout: 30 * time.Second}

// TestPeerproxyFaults: under traffic through the sidecar of the apiserver without
// batch/v1 (ConfigMaps served locally, Jobs by the peer), the peer apiserver is killed,
// restarted and hung, the local apiserver restarted, and the local apiserver's
// connections reset; each fault's outcome is checked, then every write and watch.
func TestPeerproxyFaults(t *testing.T) {
	kplug := BuildKplug(t)
	c := StartPeerproxy(t, kplug)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmNS, err := Namespaces(ctx, c.CP, "pp-cm", 4)
	if err != nil {
		t.Fatal(err)
	}
	jobNS, err := Namespaces(ctx, c.CP, "pp-job", 4)
	if err != nil {
		t.Fatal(err)
	}
	sb := c.Target("sidecar B", c.SidecarB.URL)
	loads := PeerproxyLoads{ConfigMaps: "sidecar/configmaps", Jobs: "sidecar/jobs"}
	tr, err := traffic.Start(ctx, traffic.Options{Timeout: short.RequestTimeout, Logf: t.Logf, Loads: []traffic.Load{
		{Name: loads.ConfigMaps, Target: sb, Resource: traffic.ConfigMaps, Namespaces: cmNS,
			Rate: 40, Workers: 8, Clients: 4, Watches: 8, WebSocketWatches: 2},
		{Name: loads.Jobs, Target: sb, Resource: traffic.Jobs, Namespaces: jobNS,
			Rate: 40, Workers: 8, Clients: 4, Watches: 8, WebSocketWatches: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(short.Settle)
	results := c.PeerproxyFaults(ctx, tr, loads, short, t.Logf)
	rep, err := tr.Finish(ctx, c.Target("apiserver A", c.A.URL))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		for _, p := range r.Problems {
			t.Errorf("%s: %s", r.Name, p)
		}
	}
	logReport(t, rep)
	for _, p := range rep.Problems {
		t.Error(p)
	}
}

func logReport(t *testing.T, rep *traffic.Report) {
	t.Helper()
	for _, l := range rep.Loads {
		t.Logf("%s: %d requests (%d ok, %d refused, %d unknown), p50 %v p99 %v; watches: %d events, %d resumes, %d relists, %d lost, %d duplicates; errors %v; watch ends %v",
			l.Name, l.Requests, l.OK, l.Refused, l.Unknown, l.Latency.P50, l.Latency.P99,
			l.Watches.Events, l.Watches.Resumes, l.Watches.Relists, l.Watches.Lost, l.Watches.Duplicates, l.Errors, l.Watches.Errors)
	}
}

// TestExecProxyFaults: under traffic through an exec proxy session (execproxy.Connect),
// the proxy daemon is killed mid-stream, another client is SIGKILLed, and the upstream's
// connections are reset; each fault's outcome is checked, then every write and watch.
// Then the runtime directory is removed under a client of its own.
func TestExecProxyFaults(t *testing.T) {
	kplug := BuildKplug(t)
	s := StartExecProxy(t, kplug, KplugPlugin(kplug))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	ns, err := Namespaces(ctx, s.CP, "ep", 4)
	if err != nil {
		t.Fatal(err)
	}
	session := s.Connect(ctx, t)
	target, err := s.Target("exec proxy", session)
	if err != nil {
		t.Fatal(err)
	}
	const load = "execproxy/configmaps"
	tr, err := traffic.Start(ctx, traffic.Options{Timeout: short.RequestTimeout, Logf: t.Logf, Loads: []traffic.Load{
		{Name: load, Target: target, Resource: traffic.ConfigMaps, Namespaces: ns,
			Rate: 60, Workers: 16, Watches: 8, WebSocketWatches: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(short.Settle)
	results := s.ExecProxyFaults(ctx, tr, session, load, ns[0], short, t.Logf)
	rep, err := tr.Finish(ctx, s.Direct("apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	results = append(results, s.SocketDirRemoved(ctx, func() *execproxy.Session { return s.Connect(ctx, t) }, ns[0]))
	for _, r := range results {
		t.Logf("%s: notes %v", r.Name, r.Notes)
		for _, p := range r.Problems {
			t.Errorf("%s: %s", r.Name, p)
		}
	}
	logReport(t, rep)
	for _, p := range rep.Problems {
		t.Error(p)
	}
}

var (
	longForm  = flag.Bool("load", false, "run the long form: steady load side by side with the direct path, then the faults, and write the report (make load)")
	steadyFor = flag.Duration("load.steady", 10*time.Minute, "how long each proxy's steady load runs")
	reportTo  = flag.String("load.report", "../../docs/reliability.md", "the report to write (its generated part), with its plots in reliability/ beside it")
	only      = flag.String("load.only", "", "run only this scenario: peerproxy, execproxy, or execproxy-sdk (the exec proxy with a plugin written with the SDK; only when named)")
	holdFor   = flag.Duration("load.hold", 0, "how long each fault lasts (default 40s, over the request timeout)")
	keep      = flag.String("load.artifacts", filepath.Join(os.TempDir(), "kplug-load"), "where to keep the proxies' profiles and logs")
)

// long is the form of the fault scenarios `make load` runs: outages longer than the
// traffic's request timeout, so that requests held by a hung peer time out.
var long = Timing{Hold: 40 * time.Second, Settle: 10 * time.Second, RequestTimeout: 30 * time.Second}

// TestLoad is `make load`: for each proxy, the steady load side by side with the direct
// path, then the faults under the same traffic, then the check of every write and
// watch; the figures go to docs/reliability.md. It fails if a check or a fault's outcome
// is wrong; targets that are not met are reported, not failed (the machine is shared).
func TestLoad(t *testing.T) {
	if !*longForm {
		t.Skip("the long form runs with -load (make load)")
	}
	kplug := BuildKplug(t)
	if *holdFor > 0 {
		long.Hold = *holdFor
	}
	artifacts := mkdir(t, *keep)
	t.Logf("profiles and logs go to %s", artifacts)
	run := &Run{
		Started: time.Now(), Steady: *steadyFor, Faults: long, CPUs: runtime.NumCPU(), CPUModel: CPUModel(), LoadBefore: SystemLoad(),
		Command: fmt.Sprintf("make load  # go test -run TestLoad -args -load -load.steady=%v", *steadyFor),
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	wg.Go(func() {
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var l float64
				_, _ = fmt.Sscan(SystemLoad(), &l)
				mu.Lock()
				run.LoadDuring = append(run.LoadDuring, l)
				mu.Unlock()
			}
		}
	})
	o := LongOptions{Steady: *steadyFor, Faults: long, Artifacts: artifacts, Logf: t.Logf}
	scenarios := []struct {
		name  string
		run   func(*testing.T, string, LongOptions) *Scenario
		alone bool // runs only when -load.only names it
	}{{"peerproxy", PeerproxyLong, false}, {"execproxy", ExecProxyLong, false}, {"execproxy-sdk", ExecProxySDKLong, true}}
	for _, s := range scenarios {
		if *only != "" && *only != s.name || *only == "" && s.alone {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			sc := s.run(t, kplug, o)
			run.Scenarios = append(run.Scenarios, sc)
			for _, f := range sc.Faults {
				t.Logf("%s", f.Summary())
				for _, p := range f.Problems {
					t.Errorf("%s: %s", f.Name, p)
				}
			}
			for _, p := range sc.Checks {
				t.Error(p)
			}
			for _, tg := range sc.Targets {
				t.Logf("target %q: %s (met: %v)", tg.Target, tg.Measured, tg.Met)
			}
		})
	}
	close(stop)
	wg.Wait()
	run.Ended, run.LoadAfter = time.Now(), SystemLoad()
	if err := run.Write(*reportTo); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", *reportTo)
}
