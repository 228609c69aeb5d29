package traffic

import (
	"fmt"
	"sort"
	"strconv"
	"sync"
)

// state is a state an object may be in at the end: absent, or present with the
// annotation of its last write (and, when known, that write's resourceVersion).
type state struct {
	exists bool
	write  string
	rv     string // "" when not known
}

func (s state) String() string {
	if !s.exists {
		return "absent"
	}
	if s.rv == "" {
		return fmt.Sprintf("write %s", s.write)
	}
	return fmt.Sprintf("write %s at rv %s", s.write, s.rv)
}

// object is what the traffic knows of one object it created (or tried to): the states
// it may end in, given what each request was told.
type object struct {
	res      *Resource
	ns, id   string // namespace and create ID
	name     string // known once a create was acknowledged
	body     map[string]any
	rv       string // of the last acknowledged write
	exists   bool   // as acknowledged
	finals   []state
	told     []string // failures the traffic was told for certain, for the report
	acked    []uint64 // resourceVersions of acknowledged creates and updates
	given    bool     // no more requests: a request for it got no acknowledgement
	loadName string
}

// ledger holds every object of the traffic, by resource, namespace and create ID.
type ledger struct {
	mu      sync.Mutex
	objects map[string]*object // by create ID
}

func newLedger() *ledger { return &ledger{objects: map[string]*object{}} }

func (l *ledger) add(o *object) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.objects[o.id] = o
}

// inScope returns the objects of res in ns, sorted by create ID.
func (l *ledger) inScope(res *Resource, ns string) []*object {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*object
	for _, o := range l.objects {
		if o.res.String() == res.String() && o.ns == ns {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// The methods below are called by the one worker that owns the object, under l.mu for
// the reader of the ledger (Check runs once the workers stopped).

// created records a create's answer.
func (l *ledger) created(o *object, r result, body map[string]any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch r.outcome() {
	case OK:
		var m objectMeta
		_ = decodeInto(r.body, &m)
		o.name, o.rv, o.exists, o.body = m.Metadata.Name, m.Metadata.ResourceVersion, true, body
		o.finals = []state{{exists: true, write: o.id, rv: o.rv}}
		o.acked = append(o.acked, parseRV(o.rv))
	case Refused:
		o.finals = []state{{}}
		o.told = append(o.told, "create: "+r.String())
		o.given = true
	case Unknown:
		o.finals = []state{{}, {exists: true, write: o.id}}
		o.given = true
	}
}

// updated records the answer to an update that wrote write.
func (l *ledger) updated(o *object, write string, r result, body map[string]any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch r.outcome() {
	case OK:
		var m objectMeta
		_ = decodeInto(r.body, &m)
		o.rv, o.body = m.Metadata.ResourceVersion, body
		o.finals = []state{{exists: true, write: write, rv: o.rv}}
		o.acked = append(o.acked, parseRV(o.rv))
	case Refused:
		o.told = append(o.told, "update "+write+": "+r.String())
		o.given = true
	case Unknown:
		o.finals = append(o.finals, state{exists: true, write: write})
		o.given = true
	}
}

// deleted records a delete's answer.
func (l *ledger) deleted(o *object, r result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch r.outcome() {
	case OK:
		o.exists = false
		o.finals = []state{{}}
		o.given = true // deleted: nothing more to do with it
	case Refused:
		o.told = append(o.told, "delete: "+r.String())
		o.given = true
	case Unknown:
		o.finals = append(o.finals, state{})
		o.given = true
	}
}

// give marks o as no longer used: a read of it failed, so its state is not trusted.
func (l *ledger) give(o *object) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o.given = true
}

func parseRV(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}
