package load

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/kplug/kplug/test/e2e/traffic"
)

// PeerproxyLoads names the loads through B's sidecar that the faults judge: ConfigMaps
// (served by B) and Jobs (served by A, through A's sidecar).
type PeerproxyLoads struct {
	ConfigMaps, Jobs string
}

// PeerproxyFaults injects the mixed version proxy's faults one after the other, under the
// traffic through B's sidecar, and checks each one's outcome (see FaultResult and judge);
// the traffic's own check (Finish) afterwards covers the writes and the watches across
// all of them.
func (c *PeerproxyCluster) PeerproxyFaults(ctx context.Context, tr *traffic.Traffic, loads PeerproxyLoads, tm Timing, logf func(string, ...any)) []FaultResult {
	jobsB := c.SidecarB.URL + traffic.Jobs.Collection("default")
	cmsB := c.SidecarB.URL + traffic.ConfigMaps.Collection("default")
	served := func() error {
		if err := c.expect(ctx, jobsB, http.StatusOK); err != nil {
			return err
		}
		return c.expect(ctx, cmsB, http.StatusOK)
	}
	noTimeouts := map[string]bool{}
	hungTimeouts := map[string]bool{loads.Jobs: tm.Hold >= tm.RequestTimeout}
	run := func(name string, inject, recover func() error, timeouts map[string]bool, quiet string, extra func(*FaultResult)) FaultResult {
		r := FaultResult{Name: name, Start: tr.Since()}
		logf("fault %q", name)
		if err := inject(); err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("injecting: %v", err))
			return r
		}
		time.Sleep(tm.Hold)
		if err := recover(); err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("recovering: %v", err))
			return r
		}
		var err error
		if r.Recovery, err = until(ctx, time.Minute, served); err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("not served again within a minute: %v", err))
		}
		time.Sleep(tm.Settle)
		r.End = tr.Since()
		judge(&r, collect(tr, r.Start, r.End, loads.ConfigMaps, loads.Jobs), timeouts, quiet)
		if extra != nil {
			extra(&r)
		}
		logf("%s", r.Summary())
		return r
	}
	restartA := func() error { return c.CP.Restart(ctx, 0) }
	restartB := func() error { return c.CP.Restart(ctx, 1) }
	var results []FaultResult

	results = append(results, run("peer apiserver killed (SIGKILL), then started again",
		func() error { c.A.Kill(); return nil }, restartA, noTimeouts, loads.ConfigMaps, nil))
	results = append(results, run("peer apiserver restarted (SIGTERM, then started again)",
		func() error { c.A.Stop(); return nil }, restartA, noTimeouts, loads.ConfigMaps, nil))
	results = append(results, run("peer apiserver hung (SIGSTOP, then SIGCONT)",
		c.A.Pause, c.A.Resume, hungTimeouts, loads.ConfigMaps, nil))

	var rerouted float64
	results = append(results, run("local apiserver restarted under the sidecar",
		func() error {
			var err error
			rerouted, err = Metric(ctx, c.SidecarB.Metrics, "apiserver_rerouted_request_total", `resource="configmaps"`, `code="20`)
			c.B.Stop()
			return err
		}, restartB, noTimeouts, loads.Jobs,
		func(r *FaultResult) {
			// What the peer serves goes to the peer while the local apiserver is down.
			after, err := Metric(ctx, c.SidecarB.Metrics, "apiserver_rerouted_request_total", `resource="configmaps"`, `code="20`)
			switch {
			case err != nil:
				r.Problems = append(r.Problems, err.Error())
			case after <= rerouted:
				r.Problems = append(r.Problems, "no ConfigMap request was served by the peer while the local apiserver was down")
			default:
				r.Notes = append(r.Notes, fmt.Sprintf("%.0f ConfigMap requests served by the peer while the local apiserver was down", after-rerouted))
			}
		}))

	var resets int
	results = append(results, run("the local apiserver's connections reset (TCP RST) and refused",
		func() error { resets = c.RelayB.Reset(tm.Hold); return nil }, func() error { return nil }, noTimeouts, loads.Jobs,
		func(r *FaultResult) {
			r.Notes = append(r.Notes, fmt.Sprintf("%d open connections reset at once, %d in all", resets, c.RelayB.Resets()))
		}))
	return results
}
