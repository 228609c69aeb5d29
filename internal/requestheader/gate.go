package requestheader

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kplug/kplug/internal/reverseproxy"
)

// GateOptions configure NewGate. All are required but Ready.
type GateOptions struct {
	// Client reads the ConfigMap; Names are the proxy's (see Check).
	Client kubernetes.Interface
	Names  Names
	// Interval is how often the names are read again, and the longest wait between two
	// readings that fail.
	Interval time.Duration
	Logger   *slog.Logger
	Proxy    Proxy
	// Refusal is the message of the 503 answered while the gate is closed; it names no
	// address.
	Refusal string
	// Forbidden is logged when the proxy may not read the ConfigMap, and says how to let
	// it; Unauthorized when kube-apiserver does not accept the proxy's credentials, and
	// names them.
	Forbidden, Unauthorized string
	// Ready reports whether kube-apiserver says it is ready (its /readyz answers ok). A
	// kube-apiserver that is starting answers before it is ready, and refuses everyone
	// (403) until its authorizer has synced: a reading it refuses then is no news about
	// the names. Nil means such refusals close the gate.
	Ready func(context.Context) bool
}

// readTimeout bounds one reading of the ConfigMap.
const readTimeout = 10 * time.Second

// Gate lets requests through once a reading of the request-header names succeeded and
// they fitted. Run reads them until they do, then again every Interval, and after a
// failure with backoff. Names that do not fit end Run with the *MismatchError. A reading
// that fails closes the gate until one succeeds, unless the gate is open and
// kube-apiserver is merely unavailable or not ready yet (restarting): then it serves
// nobody, or refuses everyone while its authorizer syncs, while a proxy may still have
// others to forward to (the sidecar's peers, during a restart), so the last reading holds.
type Gate struct {
	o GateOptions

	open     atomic.Bool
	opened   chan struct{}
	openOnce sync.Once
}

// NewGate returns a closed gate; Run opens it.
func NewGate(o GateOptions) *Gate {
	return &Gate{o: o, opened: make(chan struct{})}
}

// Opened is closed the first time the gate opens.
func (g *Gate) Opened() <-chan struct{} { return g.opened }

// Wrap answers 503 with Retry-After in h's place while the gate is closed.
func (g *Gate) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.open.Load() {
			reverseproxy.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, g.o.Refusal, 1)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Run reads the names until ctx ends (then it returns nil) or they do not fit (then it
// closes the gate and returns the *MismatchError). Run is called once.
func (g *Gate) Run(ctx context.Context) error {
	const firstRetry = 500 * time.Millisecond
	var (
		retry    = firstRetry
		failures int
		lastKind string
		lastLog  time.Time
	)
	for {
		attempt, cancel := context.WithTimeout(ctx, readTimeout)
		err := Check(attempt, g.o.Client, g.o.Names, g.o.Proxy)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		var mismatch *MismatchError
		if errors.As(err, &mismatch) {
			g.open.Store(false)
			return err
		}
		wait := g.o.Interval
		if err == nil {
			if failures > 0 || !g.open.Load() {
				g.o.Logger.Info("checked the identity headers "+g.o.Proxy.Server+" reads: forwarding", "failedReadings", failures)
			}
			g.open.Store(true)
			g.openOnce.Do(func() { close(g.opened) })
			retry, failures, lastKind = firstRetry, 0, ""
		} else {
			failures++
			kind, advice := g.readFailure(err)
			if kind != "unavailable" && g.open.Load() && g.o.Ready != nil && !g.o.Ready(ctx) {
				kind, advice = "starting", ": "+g.o.Proxy.Server+" is starting (its /readyz is not ok)"
			}
			keep := (kind == "unavailable" || kind == "starting") && g.open.Load()
			if !keep {
				g.open.Store(false)
			}
			// One warning when the cause changes, then one a minute while it lasts; every
			// reading at debug level.
			switch {
			case kind == lastKind && time.Since(lastLog) < time.Minute:
				g.o.Logger.Debug("reading the request-header names failed again", "err", err, "failedReadings", failures)
			case keep:
				g.o.Logger.Warn("cannot read again which identity headers "+g.o.Proxy.Server+" reads (retrying); forwarding as its last reading allows while it is unavailable or starting"+advice, "err", err, "failedReadings", failures)
			default:
				g.o.Logger.Warn("not forwarding: cannot check which identity headers "+g.o.Proxy.Server+" reads (retrying)"+advice, "err", err, "failedReadings", failures)
			}
			if kind != lastKind || time.Since(lastLog) >= time.Minute {
				lastKind, lastLog = kind, time.Now()
			}
			wait, retry = retry, min(2*retry, g.o.Interval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// readFailure names the cause of a failed reading, and what to do about it (": ...", or
// nothing where the error says it all).
func (g *Gate) readFailure(err error) (kind, advice string) {
	switch {
	case errors.Is(err, ErrNotPublished):
		return "not published", ": kube-apiserver has not written ConfigMap " + configMap + " yet"
	case apierrors.IsForbidden(err):
		return "forbidden", ": " + g.o.Forbidden
	case apierrors.IsUnauthorized(err):
		return "unauthorized", ": " + g.o.Unauthorized
	case unavailable(err):
		return "unavailable", ": " + g.o.Proxy.Server + " is not up yet, or cannot serve now"
	}
	return "other", ""
}

// unavailable reports whether err says that the apiserver did not answer, or answered
// that it cannot serve now (starting, shutting down, overloaded), rather than refusing.
func unavailable(err error) bool {
	var ne net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsInternalError(err)
}

// Readyz returns a GateOptions.Ready that asks kube-apiserver at base (https://host:port)
// for /readyz through client. kube-apiserver lets anyone read /readyz by default
// (--authorization-always-allow-paths); a failure to ask counts as not ready.
func Readyz(client *http.Client, base string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		ctx, cancel := context.WithTimeout(ctx, readTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/readyz", nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
		return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "ok"
	}
}
