package traffic

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Report is what the traffic did and what the checks found.
type Report struct {
	// Duration is how long the workers ran.
	Duration time.Duration
	Loads    []*LoadReport
	// Wrong404 lists the 404s for a collection, or an object that exists, or a path
	// ExpectServed named.
	Wrong404 []string
	// Problems lists everything the checks found wrong, the wrong 404s included: empty is
	// a pass.
	Problems []string
}

// LoadReport is one load's requests and watches.
type LoadReport struct {
	Name, Target, Resource string
	// Rate is the rate asked for; Requests were sent, of which OK, Refused and Unknown.
	Rate                           float64
	Requests, OK, Refused, Unknown int
	// Late counts the times a worker fell behind its schedule by a whole interval.
	Late int
	// Errors counts failed requests by request and kind.
	Errors map[string]int
	// Latency is of the requests that succeeded (probes aside), ByOp of each kind.
	Latency Percentiles
	ByOp    map[string]Percentiles
	Watches WatchReport
	// Samples are all requests, in the order they ended.
	Samples []Sample `json:"-"`
}

// WatchReport sums a load's watches.
type WatchReport struct {
	Watches, WebSocket int
	// Events is how many changes the watches saw; Resumes how often one resumed from its
	// resourceVersion after an error; Relists how often one listed again after 410 Gone.
	Events, Resumes, Relists int
	// Duplicates and Lost are events seen twice and acknowledged changes never seen.
	Duplicates, Lost int
	// Errors counts how watch streams ended, by kind.
	Errors map[string]int
}

// fenceWait bounds the wait for every watch to see the fences.
const fenceWait = 2 * time.Minute

// Finish stops the workers, checks the cluster through verify (an apiserver that serves
// every load's resource, directly) and stops the watches. The returned report's Problems
// list what is wrong; the error is for a check that could not be made.
func (t *Traffic) Finish(ctx context.Context, verify Target) (*Report, error) {
	if t.stopWork == nil {
		return nil, errFinished
	}
	t.stopWork()
	t.work.Wait()
	t.stopWork = nil
	dur := t.Since()
	defer t.close()
	rt, err := verify.NewTransport()
	if err != nil {
		return nil, err
	}
	v := &client{base: verify.URL, http: &http.Client{Transport: rt}, timeout: t.o.Timeout}
	rep := &Report{Duration: dur}
	t.mu.Lock()
	rep.Wrong404 = slices.Clone(t.wrong404)
	t.mu.Unlock()
	for _, w := range rep.Wrong404 {
		rep.Problems = append(rep.Problems, "wrong 404: "+w)
	}

	scopes := t.scopes()
	// A fence in each watched scope: once every watch has seen it, it has seen everything
	// written before, and no one writes any more.
	for _, sc := range scopes {
		if len(sc.watchers) == 0 {
			continue
		}
		r := v.do(ctx, http.MethodPost, sc.res.Collection(sc.ns), sc.res.newObject(sc.ns, "fence-", "fence-"+t.runID))
		if r.outcome() != OK {
			return nil, fmt.Errorf("traffic: writing the fence in %s: %s", sc.res.Collection(sc.ns), r)
		}
		var m objectMeta
		_ = decodeInto(r.body, &m)
		sc.fence = parseRV(m.Metadata.ResourceVersion)
	}
	deadline := time.Now().Add(fenceWait)
	for _, sc := range scopes {
		for _, w := range sc.watchers {
			for w.at() < sc.fence && time.Now().Before(deadline) && ctx.Err() == nil {
				sleep(ctx, 100*time.Millisecond)
			}
		}
	}
	t.close()

	for _, sc := range scopes {
		actual, err := listAll(ctx, v, sc.res, sc.ns)
		if err != nil {
			return nil, err
		}
		rep.Problems = append(rep.Problems, t.checkWrites(sc, actual)...)
		for _, w := range sc.watchers {
			rep.Problems = append(rep.Problems, checkWatch(sc, w, actual)...)
		}
	}
	for _, lr := range t.loads {
		rep.Loads = append(rep.Loads, lr.report())
	}
	return rep, nil
}

// scope is the objects of one resource in one namespace, and the watches of them.
type scope struct {
	res      *Resource
	ns       string
	watchers []*watcher
	objects  []*object
	fence    uint64
}

func (t *Traffic) scopes() []*scope {
	var out []*scope
	find := func(res *Resource, ns string) *scope {
		for _, sc := range out {
			if sc.res.String() == res.String() && sc.ns == ns {
				return sc
			}
		}
		sc := &scope{res: res, ns: ns}
		out = append(out, sc)
		return sc
	}
	for _, lr := range t.loads {
		for _, ns := range lr.Namespaces {
			find(&lr.Resource, ns)
		}
		for _, w := range lr.watchers {
			sc := find(w.res, w.ns)
			sc.watchers = append(sc.watchers, w)
		}
	}
	for _, sc := range out {
		sc.objects = t.ledger.inScope(sc.res, sc.ns)
	}
	return out
}

func listAll(ctx context.Context, c *client, res *Resource, ns string) (map[string]meta, error) {
	out := map[string]meta{}
	cont := ""
	for {
		q := "?limit=500"
		if cont != "" {
			q += "&continue=" + url.QueryEscape(cont)
		}
		r := c.do(ctx, http.MethodGet, res.Collection(ns)+q, nil)
		if r.outcome() != OK {
			return nil, fmt.Errorf("traffic: listing %s to check it: %s", res.Collection(ns), r)
		}
		var l list
		if err := decodeInto(r.body, &l); err != nil {
			return nil, err
		}
		for _, o := range l.Items {
			out[o.Metadata.Name] = o.Metadata
		}
		if cont = l.Metadata.Continue; cont == "" {
			return out, nil
		}
	}
}

// checkWrites compares what the ledger allows with what the apiserver holds.
func (t *Traffic) checkWrites(sc *scope, actual map[string]meta) []string {
	var problems []string
	byCreate := map[string][]meta{}
	for _, m := range actual {
		if id := m.Annotations[CreateAnnotation]; strings.HasPrefix(id, t.runID+"-") {
			byCreate[id] = append(byCreate[id], m)
		}
	}
	for _, o := range sc.objects {
		found := byCreate[o.id]
		delete(byCreate, o.id)
		if len(found) > 1 {
			var names []string
			for _, m := range found {
				names = append(names, m.Name)
			}
			problems = append(problems, fmt.Sprintf("create %s in %s was applied %d times: %v", o.id, sc.res.Collection(sc.ns), len(found), names))
			continue
		}
		var got state
		if len(found) == 1 {
			got = state{exists: true, write: found[0].Annotations[WriteAnnotation], rv: found[0].ResourceVersion}
		}
		if !slices.ContainsFunc(o.finals, got.allowedBy) {
			what := fmt.Sprintf("%s %s (create %s)", sc.res.Collection(sc.ns), o.name, o.id)
			problems = append(problems, fmt.Sprintf("%s is %v, but what the traffic was told allows only %v; failures it was told: %v", what, got, o.finals, o.told))
		}
	}
	for id, ms := range byCreate {
		problems = append(problems, fmt.Sprintf("%s holds %d object(s) of create %s, which the traffic never sent", sc.res.Collection(sc.ns), len(ms), id))
	}
	return problems
}

// allowedBy reports whether s is the state want describes (an unknown resourceVersion
// matches any).
func (s state) allowedBy(want state) bool {
	if s.exists != want.exists {
		return false
	}
	return !s.exists || (s.write == want.write && (want.rv == "" || want.rv == s.rv))
}

// checkWatch compares a watch's state with the apiserver's, and its events with the
// acknowledged writes.
func checkWatch(sc *scope, w *watcher, actual map[string]meta) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var problems []string
	name := w.name()
	if w.rv < sc.fence {
		problems = append(problems, fmt.Sprintf("%s stopped at rv %d, before the fence at %d (its errors: %v)", name, w.rv, sc.fence, w.errors))
		return problems
	}
	for _, d := range w.duplicates {
		problems = append(problems, fmt.Sprintf("%s: duplicate event %s", name, d))
	}
	var wrong []string
	for n, m := range actual {
		got, ok := w.state[n]
		if !ok {
			wrong = append(wrong, n+" missing")
		} else if got.rv != parseRV(m.ResourceVersion) {
			wrong = append(wrong, fmt.Sprintf("%s at rv %d, the apiserver has %s", n, got.rv, m.ResourceVersion))
		}
	}
	for n := range w.state {
		if _, ok := actual[n]; !ok {
			wrong = append(wrong, n+" deleted but still watched")
		}
	}
	if len(wrong) > 0 {
		slices.Sort(wrong)
		problems = append(problems, fmt.Sprintf("%s ended in another state than the apiserver's: %s", name, strings.Join(wrong[:min(len(wrong), 20)], "; ")))
	}
	lost := w.lost(sc)
	w.lostN = len(lost)
	if len(lost) > 0 {
		problems = append(problems, fmt.Sprintf("%s never saw %d acknowledged change(s): %s", name, len(lost), strings.Join(lost[:min(len(lost), 20)], "; ")))
	}
	return problems
}

// lost lists the acknowledged writes in the watch's scope after it started, outside the
// spans it relisted, whose events it did not see. w.mu is held.
func (w *watcher) lost(sc *scope) []string {
	var lost []string
	for _, o := range sc.objects {
		for _, rv := range o.acked {
			if rv <= w.startRV || slices.ContainsFunc(w.gaps, func(g gap) bool { return rv > g.from && rv <= g.to }) {
				continue
			}
			if !slices.Contains(w.seen[o.name], rv) {
				lost = append(lost, fmt.Sprintf("%s at rv %d", o.name, rv))
			}
		}
	}
	return lost
}

func (lr *loadRun) report() *LoadReport {
	samples, late := lr.rec.snapshot()
	r := &LoadReport{
		Name: lr.Name, Target: lr.Target.Name, Resource: lr.Resource.String(), Rate: lr.Rate,
		Late: late, Errors: map[string]int{}, ByOp: map[string]Percentiles{}, Samples: samples,
	}
	for _, s := range samples {
		r.Requests++
		switch s.Outcome {
		case OK:
			r.OK++
		case Refused:
			r.Refused++
		case Unknown:
			r.Unknown++
		}
		if s.Outcome != OK {
			r.Errors[s.Op.String()+" "+s.Kind]++
		}
	}
	r.Latency = LatencyOf(samples, func(s Sample) bool { return s.Outcome == OK && s.Op != opProbe })
	for op := range opProbe {
		if p := LatencyOf(samples, func(s Sample) bool { return s.Outcome == OK && s.Op == op }); p.N > 0 {
			r.ByOp[op.String()] = p
		}
	}
	r.Watches.Errors = map[string]int{}
	for _, w := range lr.watchers {
		w.mu.Lock()
		r.Watches.Watches++
		if w.webSocket {
			r.Watches.WebSocket++
		}
		r.Watches.Events += w.events
		r.Watches.Resumes += w.resumes
		r.Watches.Relists += w.relists
		r.Watches.Duplicates += len(w.duplicates)
		r.Watches.Lost += w.lostN
		for k, n := range w.errors {
			r.Watches.Errors[k] += n
		}
		w.mu.Unlock()
	}
	return r
}
