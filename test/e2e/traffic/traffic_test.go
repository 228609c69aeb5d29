package traffic_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/test/e2e/framework"
	"github.com/kplug/kplug/test/e2e/traffic"
)

// TestTrafficChecks runs traffic straight at a real apiserver, where nothing may go wrong,
// and then changes an object behind its back, which the checks must find.
func TestTrafficChecks(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for _, ns := range []string{"traffic-a", "traffic-b"} {
		if out, err := cp.Kubectl(ctx, cp.Admin, "create", "namespace", ns).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	tc, err := cp.ClientTLS(cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	direct := traffic.HTTPSTarget("direct", cp.Servers[0].URL, tc)
	run := func(t *testing.T, during func(*traffic.Traffic)) *traffic.Report {
		tr, err := traffic.Start(ctx, traffic.Options{Logf: t.Logf, Loads: []traffic.Load{
			{Name: "cm", Target: direct, Resource: traffic.ConfigMaps, Namespaces: []string{"traffic-a", "traffic-b"},
				Rate: 100, Workers: 8, Clients: 2, Watches: 4, WebSocketWatches: 2, MaxLive: 3},
			{Name: "jobs", Target: direct, Resource: traffic.Jobs, Namespaces: []string{"traffic-a"},
				Rate: 40, Workers: 4, Watches: 1, WebSocketWatches: 1},
		}})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		during(tr)
		time.Sleep(2 * time.Second)
		rep, err := tr.Finish(ctx, direct)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range rep.Loads {
			t.Logf("%s: %d requests, %d ok, p50 %v p99 %v; watches %+v; errors %v", l.Name, l.Requests, l.OK, l.Latency.P50, l.Latency.P99, l.Watches, l.Errors)
			if l.OK == 0 || l.Watches.Events == 0 {
				t.Errorf("%s: %d requests succeeded, watches saw %d events", l.Name, l.OK, l.Watches.Events)
			}
		}
		return rep
	}

	t.Run("straight to the apiserver, nothing is wrong", func(t *testing.T) {
		rep := run(t, func(*traffic.Traffic) {})
		for _, p := range rep.Problems {
			t.Error(p)
		}
	})

	t.Run("an object changed behind the traffic's back is found", func(t *testing.T) {
		rep := run(t, func(*traffic.Traffic) {
			// Overwrite the write annotation of every ConfigMap of the run: the ledger
			// allows only the write each was last acknowledged with.
			// (One the traffic deletes meanwhile makes kubectl fail: the others are changed.)
			out, err := cp.Kubectl(ctx, cp.Admin, "annotate", "--overwrite", "-n", "traffic-b", "configmaps", "--all",
				traffic.WriteAnnotation+"=behind-its-back").CombinedOutput()
			t.Logf("kubectl annotate: %v\n%s", err, out)
		})
		found := false
		for _, p := range rep.Problems {
			found = found || strings.Contains(p, "write behind-its-back")
		}
		if !found {
			t.Errorf("the checks missed the overwritten objects; problems: %v", rep.Problems)
		}
	})
}
