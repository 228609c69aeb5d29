package traffic

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	randv2 "math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Mix weighs the requests a Load's workers choose from.
type Mix struct {
	Get, List, Create, Update, Delete int
}

// DefaultMix is a controller's or a CLI's mix of reads and writes.
var DefaultMix = Mix{Get: 25, List: 15, Create: 20, Update: 25, Delete: 15}

// Load is one stream of traffic through one Target.
type Load struct {
	// Name names the load in reports; unique in a Traffic.
	Name     string
	Target   Target
	Resource Resource
	// Namespaces the load writes and watches; worker i writes in Namespaces[i%n]. They
	// must exist.
	Namespaces []string
	// Rate is the requests per second of all workers together, spread evenly; Workers is
	// how many request loops, each with at most one request at a time.
	Rate    float64
	Workers int
	// Clients is how many clients (transports, Target.NewTransport) the workers and watches
	// share, round robin; default Workers.
	Clients int
	// Watches and WebSocketWatches are long-lived watches of the namespaces, round robin,
	// over HTTP and over WebSocket (Target.NewDialer).
	Watches, WebSocketWatches int
	// Mix weighs the requests; zero is DefaultMix.
	Mix Mix
	// MaxLive bounds the objects a worker keeps (when the mix deletes); default 8.
	MaxLive int
}

// Options configure Start.
type Options struct {
	Loads []Load
	// Timeout bounds each request; default 30 s.
	Timeout time.Duration
	// Logf, if set, receives progress messages.
	Logf func(format string, args ...any)
}

// Traffic is running traffic: Start it, change the cluster under it, then Finish it.
type Traffic struct {
	o      Options
	runID  string
	start  time.Time
	ledger *ledger
	loads  []*loadRun

	stopWork context.CancelFunc
	work     sync.WaitGroup

	stopWatch context.CancelFunc
	watch     sync.WaitGroup

	mu       sync.Mutex
	probes   map[string]map[string]bool // by load: paths that must not 404
	wrong404 []string
}

type loadRun struct {
	Load
	clients  []*client
	rec      *recorder
	watchers []*watcher
}

// Start opens the loads' watches, waits until each has listed and is watching, and
// starts the workers. ctx bounds the wait; the traffic runs until Finish.
func Start(ctx context.Context, o Options) (*Traffic, error) {
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	t := &Traffic{o: o, runID: hex.EncodeToString(id), start: time.Now(), ledger: newLedger(), probes: map[string]map[string]bool{}}
	for _, l := range o.Loads {
		lr, err := t.newLoad(l)
		if err != nil {
			return nil, err
		}
		t.loads = append(t.loads, lr)
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	t.stopWatch = stopWatch
	ready := make(chan error)
	n := 0
	for _, lr := range t.loads {
		for _, w := range lr.watchers {
			n++
			t.watch.Go(func() { w.run(watchCtx, ready) })
		}
	}
	for range n {
		select {
		case err := <-ready:
			if err != nil {
				t.close()
				return nil, err
			}
		case <-ctx.Done():
			t.close()
			return nil, fmt.Errorf("traffic: waiting for %d watches: %w", n, ctx.Err())
		}
	}
	o.Logf("traffic: %d watches open", n)
	t.start = time.Now()
	workCtx, stopWork := context.WithCancel(context.Background())
	t.stopWork = stopWork
	for _, lr := range t.loads {
		for i := range lr.Workers {
			t.work.Go(func() { t.worker(workCtx, lr, i) })
		}
		t.work.Go(func() { t.prober(workCtx, lr) })
	}
	return t, nil
}

func (t *Traffic) newLoad(l Load) (*loadRun, error) {
	switch {
	case l.Name == "" || l.Target.NewTransport == nil || l.Resource.Name == "" || len(l.Namespaces) == 0:
		return nil, fmt.Errorf("traffic: load %q needs a name, a target with NewTransport, a resource and namespaces", l.Name)
	case l.Workers > 0 && l.Rate <= 0:
		return nil, fmt.Errorf("traffic: load %q: workers need a rate", l.Name)
	case l.WebSocketWatches > 0 && l.Target.NewDialer == nil:
		return nil, fmt.Errorf("traffic: load %q: WebSocket watches need Target.NewDialer", l.Name)
	}
	if l.Mix == (Mix{}) {
		l.Mix = DefaultMix
	}
	if l.MaxLive <= 0 {
		l.MaxLive = 8
	}
	if l.Clients <= 0 {
		l.Clients = max(l.Workers, 1)
	}
	lr := &loadRun{Load: l, rec: newRecorder()}
	for range l.Clients {
		rt, err := l.Target.NewTransport()
		if err != nil {
			return nil, fmt.Errorf("traffic: load %q: %w", l.Name, err)
		}
		c := &client{base: l.Target.URL, http: &http.Client{Transport: rt}, timeout: t.o.Timeout}
		if l.Target.NewDialer != nil && l.WebSocketWatches > 0 {
			if c.ws, err = l.Target.NewDialer(); err != nil {
				return nil, fmt.Errorf("traffic: load %q: %w", l.Name, err)
			}
		}
		lr.clients = append(lr.clients, c)
	}
	for i := range l.Watches + l.WebSocketWatches {
		lr.watchers = append(lr.watchers, &watcher{
			load: lr, res: &lr.Resource, ns: l.Namespaces[i%len(l.Namespaces)],
			client: lr.clients[i%len(lr.clients)], webSocket: i >= l.Watches,
			state: map[string]watched{}, seen: map[string][]uint64{}, errors: map[string]int{},
		})
	}
	return lr, nil
}

// Since is the time since the workers started: the clock of Samples.
func (t *Traffic) Since() time.Duration { return time.Since(t.start) }

// ExpectServed says that from now on, a LIST of path through load must not get a 404;
// the load lists it every 40 ms, beside its workers.
func (t *Traffic) ExpectServed(load, path string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.probes[load] == nil {
		t.probes[load] = map[string]bool{}
	}
	t.probes[load][path] = true
}

// NotServed says that path may get a 404 through any load from now on: it is no longer
// listed.
func (t *Traffic) NotServed(path string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, paths := range t.probes {
		delete(paths, path)
	}
}

const probeInterval = 40 * time.Millisecond

func (t *Traffic) prober(ctx context.Context, lr *loadRun) {
	c := lr.clients[0]
	for ctx.Err() == nil {
		t.mu.Lock()
		paths := slices.Sorted(maps.Keys(t.probes[lr.Name]))
		t.mu.Unlock()
		for _, p := range paths {
			at := t.Since()
			r := c.do(ctx, http.MethodGet, p+"?limit=1", nil)
			if ctx.Err() != nil {
				return
			}
			t.mu.Lock()
			mustServe := t.probes[lr.Name][p]
			t.mu.Unlock()
			lr.rec.add(at, opProbe, r)
			if r.code == http.StatusNotFound && mustServe {
				t.wrong(lr, "list "+p, r)
			}
		}
		sleep(ctx, probeInterval)
	}
}

func (t *Traffic) wrong(lr *loadRun, what string, r result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.wrong404 = append(t.wrong404, fmt.Sprintf("%s through %s at %v: %s", what, lr.Target.Name, t.Since().Round(time.Millisecond), r))
}

func sleep(ctx context.Context, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}

// worker sends the load's requests at its share of the rate, on the objects it created.
func (t *Traffic) worker(ctx context.Context, lr *loadRun, i int) {
	c := lr.clients[i%len(lr.clients)]
	ns := lr.Namespaces[i%len(lr.Namespaces)]
	rnd := randv2.New(randv2.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))
	interval := time.Duration(float64(lr.Workers) / lr.Rate * float64(time.Second))
	next := time.Now().Add(interval * time.Duration(i) / time.Duration(lr.Workers))
	var live []*object
	for n := 0; ; n++ {
		sleep(ctx, time.Until(next))
		if ctx.Err() != nil {
			return
		}
		if late := time.Since(next); late > interval {
			lr.rec.missed(int(late / interval))
			next = time.Now()
		}
		next = next.Add(interval)
		id := fmt.Sprintf("%s-%s-w%d-%d", t.runID, lr.Name, i, n)
		op := lr.Mix.choose(rnd, len(live), lr.MaxLive)
		at := t.Since()
		var r result
		switch op {
		case opCreate:
			o := &object{res: &lr.Resource, ns: ns, id: id, loadName: lr.Name}
			t.ledger.add(o)
			body := lr.Resource.newObject(ns, "t-", id)
			r = c.do(ctx, http.MethodPost, lr.Resource.Collection(ns), body)
			if ctx.Err() != nil && r.err != nil {
				t.ledger.created(o, r, nil) // canceled at the end: the outcome is unknown
				return
			}
			var obj map[string]any
			if r.outcome() == OK {
				obj, _ = decodeObject(r.body)
			}
			t.ledger.created(o, r, obj)
			if r.outcome() == OK {
				live = append(live, o)
			}
		case opList:
			r = c.do(ctx, http.MethodGet, lr.Resource.Collection(ns)+"?limit=50", nil)
			if r.code == http.StatusNotFound {
				t.wrong(lr, "list "+lr.Resource.Collection(ns), r)
			}
		case opGet:
			o := live[rnd.IntN(len(live))]
			r = c.do(ctx, http.MethodGet, lr.Resource.Item(ns, o.name), nil)
			if r.code == http.StatusNotFound {
				t.wrong(lr, "get "+lr.Resource.Item(ns, o.name), r)
			}
		case opUpdate:
			k := rnd.IntN(len(live))
			o := live[k]
			body := withWrite(o.body, id)
			r = c.do(ctx, http.MethodPut, lr.Resource.Item(ns, o.name), body)
			var obj map[string]any
			if r.outcome() == OK {
				obj, _ = decodeObject(r.body)
			}
			t.ledger.updated(o, id, r, obj)
			if r.code == http.StatusNotFound {
				t.wrong(lr, "update "+lr.Resource.Item(ns, o.name), r)
			}
			if r.outcome() != OK {
				live = slices.Delete(live, k, k+1)
			}
		case opDelete:
			k := rnd.IntN(len(live))
			o := live[k]
			r = c.do(ctx, http.MethodDelete, lr.Resource.Item(ns, o.name), map[string]any{
				"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": map[string]any{"resourceVersion": o.rv},
				// No orphan finalizer (batch/v1 Jobs' default), which only a garbage collector
				// would remove: the object goes at once.
				"propagationPolicy": "Background",
			})
			t.ledger.deleted(o, r)
			if r.code == http.StatusNotFound {
				t.wrong(lr, "delete "+lr.Resource.Item(ns, o.name), r)
			}
			live = slices.Delete(live, k, k+1)
		}
		if ctx.Err() != nil && r.err != nil {
			return // the end of the traffic, not an error
		}
		lr.rec.add(at, op, r)
	}
}

func (m Mix) choose(rnd *randv2.Rand, live, maxLive int) Op {
	w := [...]int{opGet: m.Get, opList: m.List, opCreate: m.Create, opUpdate: m.Update, opDelete: m.Delete}
	if live == 0 {
		w[opGet], w[opUpdate], w[opDelete] = 0, 0, 0
	}
	if m.Delete > 0 && live >= maxLive {
		w[opCreate] = 0
	}
	total := 0
	for _, x := range w {
		total += x
	}
	if total == 0 {
		return opList
	}
	n := rnd.IntN(total)
	for op, x := range w {
		if n < x {
			return Op(op)
		}
		n -= x
	}
	return opList
}

// withWrite returns a copy of obj (an object as the server answered it, with its
// resourceVersion) whose write annotation is write.
func withWrite(obj map[string]any, write string) map[string]any {
	out := maps.Clone(obj)
	md, _ := obj["metadata"].(map[string]any)
	md = maps.Clone(md)
	ann, _ := md["annotations"].(map[string]any)
	ann = maps.Clone(ann)
	if ann == nil {
		ann = map[string]any{}
	}
	ann[WriteAnnotation] = write
	md["annotations"] = ann
	out["metadata"] = md
	return out
}

func decodeObject(b []byte) (map[string]any, error) {
	var o map[string]any
	return o, json.Unmarshal(b, &o)
}

func decodeInto(b []byte, v any) error { return json.Unmarshal(b, v) }

// close stops the watches (the workers are stopped by Finish).
func (t *Traffic) close() {
	t.stopWatch()
	t.watch.Wait()
}

// errFinished is returned when Finish is called twice.
var errFinished = errors.New("traffic: finished already")

// Samples returns the requests the load named load has made so far, in the order they
// ended (nil for an unknown load).
func (t *Traffic) Samples(load string) []Sample {
	for _, lr := range t.loads {
		if lr.Name == load {
			s, _ := lr.rec.snapshot()
			return s
		}
	}
	return nil
}
