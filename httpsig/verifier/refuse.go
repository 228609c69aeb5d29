package verifier

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/internal/reverseproxy"
)

// Caps on what a refusal repeats of the request, in the log line and in the answer. A
// client chooses its method, path, certificate and signatures, and is refused often and
// cheaply: what it costs the proxy (and the log) to say why must not grow with them.
const (
	// maxRefusalMessage bounds a refusal's message: the Status sent back and the error
	// logged. Refusals name what they quote at most httpsig.MaxQuotedBytes of, so a
	// legitimate one fits.
	maxRefusalMessage = 2 << 10
	// maxLoggedTarget bounds the method and the path a refusal's log line names.
	maxLoggedTarget = 256
)

// clip cuts s to at most n bytes, saying so and how long s was.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:n], len(s))
}

// rejection is what the proxy answers a request it does not forward, and logs.
type rejection struct {
	code       int
	reason     metav1.StatusReason
	message    string // sent back, clipped
	retryAfter int
	level      slog.Level
	event      string // the log message
	attrs      []any  // logged beside the request's method, path and remote address
}

// refuse logs r's refusal and answers it within RefusalWriteTimeout. A client that does
// not take its answer by then (over HTTP/2, one that keeps its flow-control window shut)
// would otherwise hold the request, its headers, whatever of its body the server buffered,
// and its connection, for as long as it liked: its connection is closed instead, with every
// request on it.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, f rejection) {
	message := clip(f.message, maxRefusalMessage)
	attrs := append([]any{"method", clip(r.Method, maxLoggedTarget), "path", clip(r.URL.Path, maxLoggedTarget), "remote", r.RemoteAddr}, f.attrs...)
	h.o.Logger.Log(r.Context(), f.level, f.event, attrs...)
	rc := http.NewResponseController(w)
	setErr := rc.SetWriteDeadline(time.Now().Add(h.o.RefusalWriteTimeout))
	reverseproxy.WriteStatus(w, f.code, f.reason, message, f.retryAfter)
	if err := rc.Flush(); err != nil {
		if !errors.Is(err, http.ErrNotSupported) {
			h.o.Logger.Debug("signature proxy: the client did not take its refusal; closing its connection", "remote", r.RemoteAddr, "error", err)
			closeConnection(r.Context())
		}
		return
	}
	if setErr == nil {
		// Over HTTP/1.1 the deadline is the connection's: the next request on it, perhaps
		// a watch, must not inherit it.
		_ = rc.SetWriteDeadline(time.Time{})
	}
}

// errorAttr is err for a refusal's log line, clipped as its message is.
func errorAttr(err error) slog.Attr {
	return slog.String("error", clip(err.Error(), maxRefusalMessage))
}
