package requestheader

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kplug/kplug/internal/reverseproxy"
)

// GateOptions configure NewGate. All are required.
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
}

// readTimeout bounds one reading of the ConfigMap.
const readTimeout = 10 * time.Second

// Gate lets requests through once a reading of the request-header names succeeded and
// they fitted. Run reads them until they do, then again every Interval, and after a
// failure with backoff. Names that do not fit end Run with the *MismatchError. A reading
// that fails closes the gate until one succeeds, unless the gate is open and
// kube-apiserver is merely unavailable: then nothing reaches it anyway, while a proxy may
// still have others to forward to (the sidecar's peers, during a restart), so the last
// reading holds.
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
			keep := kind == "unavailable" && g.open.Load()
			if !keep {
				g.open.Store(false)
			}
			// One warning when the cause changes, then one a minute while it lasts; every
			// reading at debug level.
			switch {
			case kind == lastKind && time.Since(lastLog) < time.Minute:
				g.o.Logger.Debug("reading the request-header names failed again", "err", err, "failedReadings", failures)
			case keep:
				g.o.Logger.Warn("cannot read again which identity headers "+g.o.Proxy.Server+" reads (retrying); forwarding as its last reading allows while it is unavailable"+advice, "err", err, "failedReadings", failures)
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
