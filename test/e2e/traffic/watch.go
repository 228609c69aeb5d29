package traffic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// watched is an object as a watch last saw it.
type watched struct {
	rv    uint64
	write string
}

// gap is a span of resourceVersions a watch did not see event by event: it relisted
// after the server answered 410 Gone.
type gap struct{ from, to uint64 }

// watcher is one long-lived watch of a resource in a namespace, over HTTP or WebSocket,
// that resumes from its last resourceVersion after an error and relists only when the
// server says that resourceVersion is gone.
type watcher struct {
	load      *loadRun
	res       *Resource
	ns        string
	client    *client
	webSocket bool

	mu         sync.Mutex
	startRV    uint64
	rv         uint64 // of the last event (or bookmark, or list)
	state      map[string]watched
	seen       map[string][]uint64 // resourceVersions of each object's events
	gaps       []gap
	events     int
	resumes    int
	relists    int
	duplicates []string
	lostN      int // set by the check
	errors     map[string]int
}

// errGone is a 410 Gone: the resourceVersion is no longer in the server's window.
var errGone = errors.New("410 Gone")

// run lists and watches until ctx ends; ready gets nil once the first watch is open, or
// the first error.
func (w *watcher) run(ctx context.Context, ready chan<- error) {
	first := true
	signal := func(err error) {
		if first {
			first = false
			select {
			case ready <- err:
			case <-ctx.Done():
			}
		}
	}
	listed := false
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if !listed {
			if err := w.list(ctx); err != nil {
				if first {
					signal(fmt.Errorf("traffic: %s: listing %s: %w", w.load.Name, w.res.Collection(w.ns), err))
					return
				}
				w.failed(ctx, "list: "+errorKind(err))
				sleep(ctx, backoff)
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
			listed = true
		}
		err := w.stream(ctx, func() { signal(nil); backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		if first {
			signal(fmt.Errorf("traffic: %s: watching %s: %w", w.load.Name, w.res.Collection(w.ns), err))
			return
		}
		w.failed(ctx, errorKind(err))
		if errors.Is(err, errGone) {
			listed = false
			continue
		}
		w.mu.Lock()
		w.resumes++
		w.mu.Unlock()
		sleep(ctx, backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (w *watcher) failed(ctx context.Context, kind string) {
	if ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errors[kind]++
}

// errorKind names a watch's end: the status it was refused with, or the transport error.
func errorKind(err error) string {
	var s *statusError
	switch {
	case err == nil || errors.Is(err, io.EOF):
		return "end of stream"
	case errors.Is(err, errGone):
		return "410 Gone"
	case errors.As(err, &s):
		return s.r.kind()
	}
	return "transport: " + transportKind(err)
}

type statusError struct{ r result }

func (e *statusError) Error() string { return e.r.String() }

// list reads the namespace's objects and their resourceVersion, replacing the state; after
// the first list, it records the span it skipped.
func (w *watcher) list(ctx context.Context) error {
	state := map[string]watched{}
	cont := ""
	var rv uint64
	for {
		q := "?limit=500"
		if cont != "" {
			q += "&continue=" + url.QueryEscape(cont)
		}
		r := w.client.do(ctx, http.MethodGet, w.res.Collection(w.ns)+q, nil)
		if r.err != nil {
			return r.err
		}
		if r.code != http.StatusOK {
			return &statusError{r}
		}
		var l list
		if err := json.Unmarshal(r.body, &l); err != nil {
			return err
		}
		for _, o := range l.Items {
			state[o.Metadata.Name] = watched{rv: parseRV(o.Metadata.ResourceVersion), write: o.Metadata.Annotations[WriteAnnotation]}
		}
		if rv == 0 {
			rv = parseRV(l.Metadata.ResourceVersion)
		}
		if cont = l.Metadata.Continue; cont == "" {
			break
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.startRV == 0 {
		w.startRV = rv
	} else {
		w.relists++
		w.gaps = append(w.gaps, gap{from: w.rv, to: rv})
	}
	w.rv, w.state = rv, state
	return nil
}

// event is one watch event, as kube-apiserver encodes it in JSON.
type event struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// stream watches from the last resourceVersion until the stream ends or fails; open is
// called once the server accepted the watch.
func (w *watcher) stream(ctx context.Context, open func()) error {
	w.mu.Lock()
	q := "?watch=1&allowWatchBookmarks=true&resourceVersion=" + strconv.FormatUint(w.rv, 10)
	w.mu.Unlock()
	if w.webSocket {
		return w.streamWebSocket(ctx, q, open)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.client.base+w.res.Collection(w.ns)+q, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := w.client.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return refused(resp)
	}
	open()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev event
		if err := dec.Decode(&ev); err != nil {
			return err
		}
		if err := w.apply(ev); err != nil {
			return err
		}
	}
}

func refused(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusGone {
		return errGone
	}
	r := result{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After") != "", body: body}
	var s struct{ Kind, Reason, Message string }
	if json.Unmarshal(body, &s) == nil && s.Kind == "Status" {
		r.reason, r.message = s.Reason, s.Message
	}
	return &statusError{r}
}

func (w *watcher) streamWebSocket(ctx context.Context, q string, open func()) error {
	u := strings.Replace(w.client.base, "https://", "wss://", 1) + w.res.Collection(w.ns) + q
	// kube-apiserver's WebSocket handler (golang.org/x/net/websocket) refuses a handshake
	// without an Origin, as browsers send it.
	conn, resp, err := w.client.ws.DialContext(ctx, u, http.Header{"Origin": {w.client.base}})
	if resp != nil && resp.Body != nil {
		defer resp.Body.Close()
	}
	if err != nil {
		if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
			return refused(resp)
		}
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	open()
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) && ce.Code == websocket.CloseNormalClosure {
				return io.EOF
			}
			return err
		}
		var ev event
		if err := json.Unmarshal(msg, &ev); err != nil {
			return err
		}
		if err := w.apply(ev); err != nil {
			return err
		}
	}
}

// apply takes one event into the state; an ERROR event ends the stream.
func (w *watcher) apply(ev event) error {
	if ev.Type == "ERROR" {
		var s struct {
			Code    int    `json:"code"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(ev.Object, &s)
		if s.Code == http.StatusGone {
			return errGone
		}
		return &statusError{result{code: s.Code, reason: s.Reason, message: s.Message}}
	}
	var o objectMeta
	if err := json.Unmarshal(ev.Object, &o); err != nil {
		return fmt.Errorf("decoding a %s event: %w", ev.Type, err)
	}
	rv := parseRV(o.Metadata.ResourceVersion)
	w.mu.Lock()
	defer w.mu.Unlock()
	if ev.Type == "BOOKMARK" {
		w.rv = max(w.rv, rv)
		return nil
	}
	if rv <= w.rv {
		w.duplicates = append(w.duplicates, fmt.Sprintf("%s %s at rv %d, after rv %d", ev.Type, o.Metadata.Name, rv, w.rv))
		return nil
	}
	w.rv = rv
	w.events++
	name := o.Metadata.Name
	w.seen[name] = append(w.seen[name], rv)
	switch ev.Type {
	case "ADDED", "MODIFIED":
		w.state[name] = watched{rv: rv, write: o.Metadata.Annotations[WriteAnnotation]}
	case "DELETED":
		delete(w.state, name)
	default:
		return fmt.Errorf("unknown event type %q", ev.Type)
	}
	return nil
}

func (w *watcher) at() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rv
}

func (w *watcher) name() string {
	how := "watch"
	if w.webSocket {
		how = "WebSocket watch"
	}
	return fmt.Sprintf("%s %s of %s through %s", how, w.res, w.ns, w.load.Target.Name)
}
