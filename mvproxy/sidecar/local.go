package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/internal/flight"
	"github.com/kplug/kplug/internal/reverseproxy"
	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// retryAfterSeconds is what a client is told to wait when the local apiserver is
// unreachable.
const retryAfterSeconds = 1

// newLocalProxy is the Handler's Local: a reverse proxy to the local apiserver at target
// that forwards the caller as mvproxy.ForwardIdentity says, over plain when the request's
// own credentials travel, and over withProxyCert (the front-proxy client certificate)
// when the identity headers do.
//
// A 404 for a resource the local discovery lists, not about a missing object, calls
// notServed: the server may have restarted unnoticed as a version without it, or a CRD
// went away. Anyone can cause such a 404 (a namespaced path for a cluster-scoped
// resource), so it must only make the discovery be read again, never change routing.
//
// A request the apiserver cannot be reached for is answered 503 with Retry-After, unless
// it may have been sent and is not a read: then the apiserver may have processed it, and
// the 503 says so, without Retry-After, which clients obey for every method.
func newLocalProxy(target *url.URL, plain, withProxyCert http.RoundTripper, dir *mvproxy.Directory, m *mvproxy.Metrics, log *slog.Logger, notServed func()) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = target.Scheme, target.Host, ""
			mvproxy.ForwardIdentity(pr, false)
		},
		Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if sent, ok := r.Context().Value(sentKey{}).(*reverseproxy.Sent); ok {
				r = sent.Trace(r)
			}
			if c, _ := mvproxy.CallerFrom(r.Context()); c.User != nil {
				return withProxyCert.RoundTrip(r)
			}
			return plain.RoundTrip(r)
		}),
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode != http.StatusNotFound {
				return nil
			}
			if gvr, ok := mvproxy.ResourceOf(resp.Request.URL.Path); ok && dir.Local().Serves(gvr) && pathNotServed(resp) {
				notServed()
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			labels := discovery.GVR{} // not a resource request: discovery, health
			if gvr, ok := mvproxy.ResourceOf(r.URL.Path); ok {
				labels = dir.MetricLabels(gvr)
			}
			m.ProxyError(mvproxy.ErrorLocalUnreachable, labels)
			// It may be restarting as another version: what it serves is unknown until its
			// discovery is read again.
			dir.MarkLocalStale()
			// Addresses and dial errors go to the log, not to a client that may be anonymous.
			log.Warn("local apiserver unreachable", "url", target.String(), "method", r.Method, "err", err)
			if sent, _ := r.Context().Value(sentKey{}).(*reverseproxy.Sent); sent != nil && sent.Maybe() && !reverseproxy.Repeatable(r.Method) {
				// It may have been processed: no Retry-After, which clients obey for any method.
				reverseproxy.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
					reverseproxy.LocalMayHaveProcessedMessage, 0)
				return
			}
			reverseproxy.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
				reverseproxy.LocalUnreachableMessage, retryAfterSeconds)
		},
		ErrorLog:   reverseproxy.ErrorLog(log),
		BufferPool: reverseproxy.BufferPool,
	}
	h := reverseproxy.StreamsWithSmallBuffers(rp)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sentKey{}, &reverseproxy.Sent{})))
	})
}

// sentKey finds, in a request's context, whether the local proxy may have sent it.
type sentKey struct{}

// pathNotServed reports whether a 404 from kube-apiserver says that it does not serve the
// path, rather than that an object is missing: for a group it does not serve it answers
// plain text, for a version or resource it does not serve a JSON Status without details,
// and for a missing object a Status naming it. It reads at most 4 KiB of a JSON body and
// puts back what it read. Other encodings count as a missing object.
func pathNotServed(resp *http.Response) bool {
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "text/plain") {
		return true
	}
	if !strings.HasPrefix(ct, "application/json") {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	var status metav1.Status
	if err != nil || json.Unmarshal(head, &status) != nil || status.Kind != "Status" {
		return false
	}
	return status.Details == nil || status.Details.Name == ""
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// LocalDiscovery keeps the Directory's local discovery fresh: Run refreshes it periodically,
// Refresh on demand (mvproxy.HandlerOptions.RefreshLocal), at most once per MinInterval. Its
// fields must not change once in use; it is safe for concurrent use.
type LocalDiscovery struct {
	Directory *mvproxy.Directory
	// Fetch reads the local server's own discovery (see discovery.Fetch).
	Fetch func(context.Context) (*discovery.Document, error)
	// Interval between periodic refreshes; MinInterval between refreshes on demand.
	Interval, MinInterval time.Duration
	// Timeout bounds one fetch; default 30s. A fetch is shared by the callers that ask
	// while it runs and belongs to none of them: a caller that gives up stops waiting,
	// but neither stops the fetch nor makes it fail for the others.
	Timeout time.Duration
	// OnError, if set, is told about failed refreshes.
	OnError func(error)
	// OnChange, if set, is called after a refresh that found the local server serving
	// something else (Directory.LocalGeneration changed).
	OnChange func()

	flight     flight.Group[struct{}]
	mu         sync.Mutex
	last       time.Time // end of the last fetch, zero to force the next
	lastErr    error
	refreshing atomic.Bool // a RefreshSoon is under way
}

// RefreshSoon starts a Refresh in the background, unless one it started is under way;
// it never blocks. Like Refresh, it fetches at most once per MinInterval.
func (c *LocalDiscovery) RefreshSoon() {
	if !c.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.refreshing.Store(false)
		_ = c.Refresh(context.Background()) // bounded by Timeout; errors go to OnError
	}()
}

// Refresh fetches the local discovery unless it was fetched less than MinInterval ago,
// in which case it returns that fetch's error. Concurrent callers share one fetch; each
// waits for it as long as its own ctx allows.
func (c *LocalDiscovery) Refresh(ctx context.Context) error {
	if recent, lastErr := c.recent(); recent {
		return lastErr
	}
	_, err := c.flight.Do(ctx, "local", func(ctx context.Context) (struct{}, error) {
		// A caller may reach the flight only after the fetch it would have shared has
		// ended: look again, or it would fetch a second time.
		if recent, lastErr := c.recent(); recent {
			return struct{}{}, lastErr
		}
		return c.fetch(ctx)
	})
	return err
}

// recent reports whether the last fetch ended less than MinInterval ago, and its error.
func (c *LocalDiscovery) recent() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.last.IsZero() && time.Since(c.last) < c.MinInterval, c.lastErr
}

// fetch runs detached from the callers (see Refresh), bounded by Timeout.
func (c *LocalDiscovery) fetch(ctx context.Context) (struct{}, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	doc, err := c.Fetch(ctx)
	if err == nil {
		before := c.Directory.LocalGeneration()
		c.Directory.SetLocal(doc)
		if c.OnChange != nil && c.Directory.LocalGeneration() != before {
			c.OnChange()
		}
	} else {
		c.Directory.MarkLocalStale()
		if c.OnError != nil {
			c.OnError(err)
		}
	}
	c.mu.Lock()
	c.last, c.lastErr = time.Now(), err
	c.mu.Unlock()
	return struct{}{}, err
}

// Run refreshes every Interval until ctx ends; the first refresh is at once, and is
// retried every second until it succeeds.
func (c *LocalDiscovery) Run(ctx context.Context) {
	for c.Directory.Local() == nil {
		if c.forceRefresh(ctx) == nil {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = c.forceRefresh(ctx)
		}
	}
}

func (c *LocalDiscovery) forceRefresh(ctx context.Context) error {
	c.mu.Lock()
	c.last = time.Time{}
	c.mu.Unlock()
	return c.Refresh(ctx)
}
