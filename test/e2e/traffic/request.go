package traffic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// Target is one way into the cluster: a proxy, or an apiserver directly.
type Target struct {
	// Name says which way in, in reports ("sidecar-1", "direct").
	Name string
	// URL is where requests go (https://host:port); paths are the API server's.
	URL string
	// NewTransport returns the transport of one client, which authenticates it. Each
	// client of a Load gets its own, so that a Load of many clients opens the connections
	// many client processes would.
	NewTransport func() (http.RoundTripper, error)
	// NewDialer, if set, returns the WebSocket dialer of one client, for watches over an
	// upgraded connection (Load.WebSocketWatches).
	NewDialer func() (*websocket.Dialer, error)
}

// Outcome is what a request's answer says about a write.
type Outcome uint8

const (
	// OK is a 2xx answer.
	OK Outcome = iota
	// Refused is an answer that says the request was not processed: a 4xx, or a 5xx with
	// Retry-After (which client-go takes as leave to send the request again).
	Refused
	// Unknown is a transport error or another 5xx: the request may have been processed.
	Unknown
)

func (o Outcome) String() string {
	return [...]string{"ok", "refused", "unknown"}[o]
}

// maxBody bounds what is read of an answer: lists of a few dozen small objects.
const maxBody = 8 << 20

// result is the answer to one request.
type result struct {
	code       int
	retryAfter bool
	reason     string // a Status answer's reason
	message    string // a Status answer's message
	body       []byte
	err        error
	took       time.Duration
}

func (r result) outcome() Outcome {
	switch {
	case r.err != nil:
		return Unknown
	case r.code >= 200 && r.code < 300:
		return OK
	case r.code >= 400 && r.code < 500, r.code >= 500 && r.retryAfter:
		return Refused
	}
	return Unknown
}

// kind names an error for reports: the status code, reason, Retry-After and who answered
// (the mixed version proxy, the exec proxy or the apiserver), or the transport error.
func (r result) kind() string {
	if r.err != nil {
		return "transport: " + transportKind(r.err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d", r.code)
	if r.reason != "" {
		b.WriteString(" " + r.reason)
	}
	if r.retryAfter {
		b.WriteString(" Retry-After")
	}
	switch {
	case strings.HasPrefix(r.message, "mvproxy:"):
		// The sidecar's few messages: "batch/v1/jobs is served by 1 peer(s), none reachable".
		why, _, _ := strings.Cut(strings.TrimPrefix(r.message, "mvproxy: "), ";")
		b.WriteString(" (mvproxy: " + why + ")")
	case strings.HasPrefix(r.message, "exec proxy"):
		// "exec proxy: POST /api/...: <cause>": the cause, without the path.
		why := r.message[strings.LastIndex(r.message, ": ")+2:]
		b.WriteString(" (exec proxy: " + why[:min(len(why), 60)] + ")")
	}
	return b.String()
}

func (r result) String() string {
	if r.err != nil {
		return r.err.Error()
	}
	if r.message != "" {
		return fmt.Sprintf("%d: %s", r.code, r.message)
	}
	return fmt.Sprintf("%d: %.200s", r.code, r.body)
}

func transportKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNRESET), strings.Contains(err.Error(), "connection reset"):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	case strings.Contains(err.Error(), "http2: client connection lost"), strings.Contains(err.Error(), "GOAWAY"):
		return "connection lost"
	case strings.Contains(err.Error(), "stream error"):
		return "HTTP/2 stream reset"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:] // the cause, without addresses and paths
	}
	return "other: " + msg[:min(len(msg), 60)]
}

// client is one client of a Load: one transport, as one client process has.
type client struct {
	base    string
	http    *http.Client
	ws      *websocket.Dialer
	timeout time.Duration
}

// do sends one request with a JSON body (nil for none) and reads the answer.
func (c *client) do(ctx context.Context, method, path string, body any) result {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return result{err: err}
		}
		rd = bytes.NewReader(b)
	}
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return result{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	r := result{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After") != ""}
	r.body, err = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	r.took = time.Since(start)
	if err != nil {
		r.err = fmt.Errorf("reading the answer (%d): %w", resp.StatusCode, err)
		return r
	}
	if r.code >= 300 {
		var s struct {
			Kind, Reason, Message string
		}
		if json.Unmarshal(r.body, &s) == nil && s.Kind == "Status" {
			r.reason, r.message = s.Reason, s.Message
		}
	}
	return r
}

// meta is what the traffic reads of an object.
type meta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	ResourceVersion string            `json:"resourceVersion"`
	Annotations     map[string]string `json:"annotations"`
}

type objectMeta struct {
	Metadata meta `json:"metadata"`
}

type list struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	Items []objectMeta `json:"items"`
}
