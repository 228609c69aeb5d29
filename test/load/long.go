package load

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/test/e2e/traffic"
)

// loadMix is the steady load's mix: mostly reads, as controllers and CLIs send.
var loadMix = traffic.Mix{Get: 40, List: 20, Create: 13, Update: 17, Delete: 10}

// PeerproxyLong is the mixed version proxy's long run: through B's sidecar, 250 requests/s
// and 500 watches on ConfigMaps (served by B) and as many on Jobs (served by A, proxied to
// the peer), and the same straight to B and A, side by side; then the faults.
func PeerproxyLong(t *testing.T, kplug string, o LongOptions) *Scenario {
	c := StartPeerproxy(t, kplug)
	keepLogs(t, o.Artifacts, map[string]string{c.SidecarA.Process: c.SidecarA.Proc.LogPath(), c.SidecarB.Process: c.SidecarB.Proc.LogPath(),
		"peerproxy-kube-apiserver-A": c.A.LogPath(), "peerproxy-kube-apiserver-B": c.B.LogPath()})
	ctx, cancel := context.WithTimeout(context.Background(), o.Steady+30*time.Minute)
	defer cancel()
	ns := func(prefix string) []string {
		names, err := Namespaces(ctx, c.CP, prefix, 100)
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	sb, directA, directB := c.Target("sidecar B", c.SidecarB.URL), c.Target("apiserver A", c.A.URL), c.Target("apiserver B", c.B.URL)
	load := func(name string, target traffic.Target, res traffic.Resource, namespaces []string) traffic.Load {
		return traffic.Load{Name: name, Target: target, Resource: res, Namespaces: namespaces, Mix: loadMix,
			Rate: 250, Workers: 100, Clients: 50, Watches: 450, WebSocketWatches: 50}
	}
	loads := PeerproxyLoads{ConfigMaps: "peerproxy/configmaps", Jobs: "peerproxy/jobs"}
	o.Logf("starting 2,000 watches and 1,000 requests/s")
	tr, err := traffic.Start(ctx, traffic.Options{Timeout: o.Faults.RequestTimeout, Logf: o.Logf, Loads: []traffic.Load{
		load(loads.ConfigMaps, sb, traffic.ConfigMaps, ns("pp-cm")),
		load(loads.Jobs, sb, traffic.Jobs, ns("pp-job")),
		load("direct/configmaps", directB, traffic.ConfigMaps, ns("d-cm")),
		load("direct/jobs", directA, traffic.Jobs, ns("d-job")),
	}})
	if err != nil {
		t.Fatal(err)
	}
	sampler := NewSampler(time.Now().Add(-tr.Since()), c.Watched()...)
	stopSampling := keepSampling(ctx, sampler)
	sc := &Scenario{Name: "kplug peerproxy", Steady: o.Steady, Proxies: []string{c.SidecarB.Name, c.SidecarA.Name}}
	sc.Profile = waitSteady(o, tr, func() string {
		top := profileTop(ctx, c.PprofDir, c.SidecarB.Proc.PID(), 30*time.Second, o.Artifacts, "peerproxy-B")
		sc.Memory = memoryOf(ctx, c.PprofDir, c.SidecarB.Proc.PID(), o.Artifacts, "peerproxy-B")
		return top
	})
	sc.FaultsAt = tr.Since()
	sc.Faults = c.PeerproxyFaults(ctx, tr, loads, o.Faults, o.Logf)
	rep, err := tr.Finish(ctx, directA)
	stopSampling()
	if err != nil {
		t.Fatal(err)
	}
	sc.collect(rep, sampler, c.Watched())
	byName := sc.loadsByName()
	sc.Pairs = []Pair{
		pair("ConfigMaps, served by the local apiserver", byName[loads.ConfigMaps], byName["direct/configmaps"]),
		pair("Jobs, proxied to the peer", byName[loads.Jobs], byName["direct/jobs"]),
	}
	sc.judgeTargets(0)
	return sc
}

// ExecProxyLong is the exec proxy's long run: 64 clients through one session's proxy,
// each with 4 requests/s and a watch (and 8 WebSocket watches through the bridge), and
// the same 64 clients straight to the apiserver, side by side; then the faults.
func ExecProxyLong(t *testing.T, kplug string, o LongOptions) *Scenario {
	return execProxyLong(t, kplug, KplugPlugin(kplug), "exec proxy", o)
}

// ExecProxySDKLong is ExecProxyLong with a plugin written with kplug's SDK
// (cmd/sdk-proxy-plugin) in place of kplug's: its daemon must meet the same bound.
func ExecProxySDKLong(t *testing.T, kplug string, o LongOptions) *Scenario {
	return execProxyLong(t, kplug, SDKPlugin(t), "exec proxy (SDK plugin)", o)
}

func execProxyLong(t *testing.T, kplug string, plugin Plugin, name string, o LongOptions) *Scenario {
	s := StartExecProxy(t, kplug, plugin)
	keepLogs(t, o.Artifacts, map[string]string{"execproxy-kube-apiserver": s.CP.Servers[0].LogPath()})
	ctx, cancel := context.WithTimeout(context.Background(), o.Steady+30*time.Minute)
	defer cancel()
	ns := func(prefix string) []string {
		names, err := Namespaces(ctx, s.CP, prefix, 64)
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	session := s.Connect(ctx, t)
	target, err := s.Target("exec proxy", session)
	if err != nil {
		t.Fatal(err)
	}
	const proxied = "execproxy/configmaps"
	load := func(name string, target traffic.Target, namespaces []string) traffic.Load {
		return traffic.Load{Name: name, Target: target, Resource: traffic.ConfigMaps, Namespaces: namespaces, Mix: loadMix,
			Rate: 256, Workers: 64, Clients: 64, Watches: 64, WebSocketWatches: 8}
	}
	epNS := ns("ep")
	tr, err := traffic.Start(ctx, traffic.Options{Timeout: o.Faults.RequestTimeout, Logf: o.Logf, Loads: []traffic.Load{
		load(proxied, target, epNS),
		load("direct/configmaps", s.Direct("apiserver"), ns("d")),
	}})
	if err != nil {
		t.Fatal(err)
	}
	watched := []Watched{
		{Name: "exec proxy daemon", PID: s.Daemon, PprofDir: s.PprofDir},
		{Name: "kube-apiserver", PID: runningPID(s.CP.Servers[0])},
		Harness,
	}
	sampler := NewSampler(time.Now().Add(-tr.Since()), watched...)
	stopSampling := keepSampling(ctx, sampler)
	sc := &Scenario{Name: name, Steady: o.Steady, Proxies: []string{"exec proxy daemon"}}
	sc.Profile = waitSteady(o, tr, func() string {
		top := profileTop(ctx, s.PprofDir, s.Daemon(), 30*time.Second, o.Artifacts, "execproxy")
		sc.Memory = memoryOf(ctx, s.PprofDir, s.Daemon(), o.Artifacts, "execproxy")
		return top
	})
	sc.FaultsAt = tr.Since()
	sc.Faults = s.ExecProxyFaults(ctx, tr, session, proxied, epNS[0], o.Faults, o.Logf)
	rep, err := tr.Finish(ctx, s.Direct("apiserver"))
	stopSampling()
	if err != nil {
		t.Fatal(err)
	}
	sc.Faults = append(sc.Faults, s.SocketDirRemoved(ctx, func() *execproxy.Session { return s.Connect(ctx, t) }, "default"))
	sc.collect(rep, sampler, watched)
	byName := sc.loadsByName()
	sc.Pairs = []Pair{pair("ConfigMaps through the exec proxy", byName[proxied], byName["direct/configmaps"])}
	sc.judgeTargets(48 << 20)
	return sc
}

func (sc *Scenario) collect(rep *traffic.Report, s *Sampler, watched []Watched) {
	sc.Checks = rep.Problems
	sc.Watches = map[string]traffic.WatchReport{}
	sc.Series = map[string][]Point{}
	for _, l := range rep.Loads {
		sc.Loads = append(sc.Loads, steadyStats(l, sc.FaultsAt))
		sc.Watches[l.Name] = l.Watches
		sc.Series[l.Name] = series(l, rep.Duration)
	}
	sc.Procs = map[string][]ProcSample{}
	for _, w := range watched {
		sc.Procs[w.Name] = s.Series(w.Name)
		sc.ProcOrder = append(sc.ProcOrder, w.Name)
	}
}

func (sc *Scenario) loadsByName() map[string]Stats {
	m := map[string]Stats{}
	for _, l := range sc.Loads {
		m[l.Name] = l
	}
	return m
}

// keepLogs copies the logs of procs into dir when the test ends (before the control plane
// and its directory go).
func keepLogs(t *testing.T, dir string, procs map[string]string) {
	t.Cleanup(func() {
		for name, path := range procs {
			if b, err := os.ReadFile(path); err == nil {
				_ = os.WriteFile(filepath.Join(dir, name+".log"), b, 0o600)
			}
		}
	})
}
