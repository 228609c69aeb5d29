package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// kube-apiserver publishes its --requestheader-* flags in this ConfigMap (read by every
// aggregated apiserver), as JSON lists under the keys of requestHeaderNames. Every
// kube-apiserver of the cluster writes into it the union of what it holds and its own
// flags, so a name, once published, stays until someone removes it.
const (
	authenticationConfigNamespace = "kube-system"
	authenticationConfigName      = "extension-apiserver-authentication"
)

// requestHeaderNames are, per key of the ConfigMap, the only names the sidecar can let
// kube-apiserver read identity from: those it sets when it forwards a user and removes
// from every request (mvproxy.SetIdentityHeaders). An empty list is fine for the UID.
var requestHeaderNames = []struct {
	key, name string
	required  bool
}{
	{"requestheader-username-headers", "X-Remote-User", true},
	{"requestheader-group-headers", "X-Remote-Group", true},
	{"requestheader-extra-headers-prefix", "X-Remote-Extra-", true},
	{"requestheader-uid-headers", "X-Remote-Uid", false},
}

// RequestHeaderError is Serve's refusal to forward users to a kube-apiserver that may read
// identity from header names the sidecar does not remove from clients' requests (a
// client could name any user or group through them), or that does not read the ones it
// sets. The names are those of the ConfigMap kube-system/extension-apiserver-authentication,
// which holds every name any kube-apiserver of the cluster ever published.
type RequestHeaderError struct {
	// Flag is kube-apiserver's flag (the ConfigMap key) whose names do not fit.
	Flag string
	// Names are its names, as the ConfigMap lists them; Want the sidecar's.
	Names []string
	Want  string
	// Unknown are the names other than Want: kube-apiserver may read identity from them,
	// and the sidecar neither sets nor removes them. Empty when only Want is missing.
	Unknown []string
}

func (e *RequestHeaderError) Error() string {
	cm := authenticationConfigNamespace + "/" + authenticationConfigName
	if len(e.Unknown) == 0 {
		return fmt.Sprintf("the request-header names in ConfigMap %s have --%s=%s, without %s, which the sidecar sets: kube-apiserver would not believe the users it forwards; run kube-apiserver with --%s=%s",
			cm, e.Flag, strings.Join(e.Names, ","), e.Want, e.Flag, e.Want)
	}
	unknown := strings.Join(e.Unknown, ",")
	return fmt.Sprintf("the request-header names in ConfigMap %s have --%s=%s, but the sidecar sets and removes only %s: a client could assert any identity through %s if the local kube-apiserver reads it. "+
		"The ConfigMap keeps every name any kube-apiserver of the cluster ever published: run each with --%s=%s, then remove %s from the ConfigMap (kubectl -n %s edit configmap %s) or delete the ConfigMap, and the kube-apiservers write their current names back",
		cm, e.Flag, strings.Join(e.Names, ","), e.Want, unknown, e.Flag, e.Want, unknown, authenticationConfigNamespace, authenticationConfigName)
}

// errNotPublished is checkRequestHeaders' error when kube-apiserver has not written the
// ConfigMap (yet: it does within seconds of starting).
var errNotPublished = errors.New("ConfigMap " + authenticationConfigNamespace + "/" + authenticationConfigName + " does not exist: kube-apiserver writes it once it has started")

// checkRequestHeaders compares the identity header names the local kube-apiserver reads
// from front proxies, as they are published, with those the sidecar handles. It returns
// nil when they fit or no front proxy is trusted (no request-header CA), a
// *RequestHeaderError when they do not, and another error when it could not read them:
// errNotPublished, a Forbidden error (no RBAC to get the ConfigMap), or any other.
func checkRequestHeaders(ctx context.Context, client kubernetes.Interface) error {
	cm, err := client.CoreV1().ConfigMaps(authenticationConfigNamespace).Get(ctx, authenticationConfigName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return errNotPublished
	}
	if err != nil {
		return fmt.Errorf("reading ConfigMap %s/%s: %w", authenticationConfigNamespace, authenticationConfigName, err)
	}
	if cm.Data["requestheader-client-ca-file"] == "" {
		return nil // no front proxy is trusted: identity headers are never read
	}
	for _, h := range requestHeaderNames {
		var names []string
		if v := cm.Data[h.key]; v != "" {
			if err := json.Unmarshal([]byte(v), &names); err != nil {
				return fmt.Errorf("reading ConfigMap %s/%s: %s: %w", authenticationConfigNamespace, authenticationConfigName, h.key, err)
			}
		}
		// kube-apiserver keeps names apart that differ in case only; header names do not.
		found, unknown := false, []string(nil)
		for _, n := range names {
			switch {
			case strings.EqualFold(n, h.name):
				found = true
			case !containsFold(unknown, n):
				unknown = append(unknown, n)
			}
		}
		if len(unknown) > 0 || h.required && !found {
			return &RequestHeaderError{Flag: h.key, Names: names, Want: h.name, Unknown: unknown}
		}
	}
	return nil
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// requestHeaderTimeout bounds one reading of the ConfigMap.
const requestHeaderTimeout = 10 * time.Second

// headerGate lets requests through once a reading of the request-header names succeeded
// and they fitted. It reads them until they do, then again every interval, and after a
// failure with backoff. Names that do not fit end run with the *RequestHeaderError. A
// reading that fails closes the gate until one succeeds, unless the gate is open and the
// local apiserver is merely unavailable: then nothing reaches it anyway, while requests
// for what peers serve must still go to them (a restart during an upgrade), so the last
// reading holds.
type headerGate struct {
	client   kubernetes.Interface
	interval time.Duration
	log      *slog.Logger

	open     atomic.Bool
	opened   chan struct{} // closed the first time the gate opens
	openOnce sync.Once
}

func newHeaderGate(client kubernetes.Interface, interval time.Duration, log *slog.Logger) *headerGate {
	return &headerGate{client: client, interval: interval, log: log, opened: make(chan struct{})}
}

// notChecked is the answer while the gate is closed; it names no address.
const notChecked = "peerproxy: not forwarding until it has read which identity headers the local kube-apiserver reads from front proxies"

// wrap answers 503 in h's place while the gate is closed.
func (g *headerGate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.open.Load() {
			reverseproxy.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, notChecked, 1)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// run reads the names until ctx ends (then it returns nil) or they do not fit (then it
// closes the gate and returns the *RequestHeaderError).
func (g *headerGate) run(ctx context.Context) error {
	const firstRetry = 500 * time.Millisecond
	var (
		retry    = firstRetry
		failures int
		lastKind string
		lastLog  time.Time
	)
	for {
		attempt, cancel := context.WithTimeout(ctx, requestHeaderTimeout)
		err := checkRequestHeaders(attempt, g.client)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		var mismatch *RequestHeaderError
		if errors.As(err, &mismatch) {
			g.open.Store(false)
			return err
		}
		wait := g.interval
		if err == nil {
			if failures > 0 || !g.open.Load() {
				g.log.Info("checked the identity headers the local kube-apiserver reads: forwarding", "failedReadings", failures)
			}
			g.open.Store(true)
			g.openOnce.Do(func() { close(g.opened) })
			retry, failures, lastKind = firstRetry, 0, ""
		} else {
			failures++
			kind, advice := readFailure(err)
			keep := kind == "unavailable" && g.open.Load()
			if !keep {
				g.open.Store(false)
			}
			// One warning when the cause changes, then one a minute while it lasts; every
			// reading at debug level.
			switch {
			case kind == lastKind && time.Since(lastLog) < time.Minute:
				g.log.Debug("reading the request-header names failed again", "err", err, "failedReadings", failures)
			case keep:
				g.log.Warn("cannot read again which identity headers the local kube-apiserver reads (retrying); forwarding as its last reading allows while it is unavailable"+advice, "err", err, "failedReadings", failures)
			default:
				g.log.Warn("not forwarding: cannot check which identity headers the local kube-apiserver reads (retrying)"+advice, "err", err, "failedReadings", failures)
			}
			if kind != lastKind || time.Since(lastLog) >= time.Minute {
				lastKind, lastLog = kind, time.Now()
			}
			wait, retry = retry, min(2*retry, g.interval)
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
func readFailure(err error) (kind, advice string) {
	cm := authenticationConfigNamespace + "/" + authenticationConfigName
	switch {
	case errors.Is(err, errNotPublished):
		return "not published", ": kube-apiserver has not written ConfigMap " + cm + " yet"
	case apierrors.IsForbidden(err):
		return "forbidden", ": the sidecar's user may not get ConfigMap " + cm +
			": bind it to the Role extension-apiserver-authentication-reader in " + authenticationConfigNamespace + " (docs/peerproxy-rbac.yaml)"
	case apierrors.IsUnauthorized(err):
		return "unauthorized", ": kube-apiserver does not accept the sidecar's credentials (--kubeconfig)"
	case unavailable(err):
		return "unavailable", ": the local kube-apiserver is not up yet, or cannot serve now"
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
