package reverseproxy

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// progressWriter bounds each write of a response to a duration (GuardLimits.WriteProgress).
// A timer runs while a write is under way; when it fires, the response's write deadline
// is set in the past, which resets an HTTP/2 stream and fails an HTTP/1.1 connection's
// write, so the handler's write returns. If it still has not, the connection is closed.
type progressWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	conn    *guardedConn // nil outside a Guard's listener
	timeout time.Duration

	mu       sync.Mutex
	timer    *time.Timer
	stage    int  // 0 idle, 1 writing, 2 deadline passed
	done     bool // the handler returned: the ResponseWriter may no longer be used
	hijacked bool
}

func newProgressWriter(w http.ResponseWriter, r *http.Request, timeout time.Duration) *progressWriter {
	pw := &progressWriter{ResponseWriter: w, rc: http.NewResponseController(w), conn: guardedConnOf(r.Context()), timeout: timeout}
	if r.ProtoMajor == 1 {
		// The deadline is the connection's: one left by the previous request's last
		// flush (finish) must not cut this one.
		_ = pw.rc.SetWriteDeadline(time.Time{})
	}
	pw.timer = time.AfterFunc(time.Hour, pw.expired)
	pw.timer.Stop()
	return pw
}

func (w *progressWriter) start() {
	w.mu.Lock()
	w.stage = 1
	w.timer.Reset(w.timeout)
	w.mu.Unlock()
}

func (w *progressWriter) end() {
	w.mu.Lock()
	w.stage = 0
	w.timer.Stop()
	w.mu.Unlock()
}

// expired runs when a write took the whole timeout: the first time, it sets the write
// deadline in the past; the second, it closes the connection.
func (w *progressWriter) expired() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done || w.hijacked || w.stage == 0 {
		return
	}
	if w.stage == 1 {
		w.stage = 2
		_ = w.rc.SetWriteDeadline(time.Now().Add(-time.Second))
		w.timer.Reset(w.timeout)
		return
	}
	if w.conn != nil {
		_ = w.conn.Conn.Close()
	}
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.start()
	defer w.end()
	return w.ResponseWriter.Write(p)
}

// FlushError is what http.ResponseController.Flush calls, as httputil.ReverseProxy does.
func (w *progressWriter) FlushError() error {
	w.start()
	defer w.end()
	return w.rc.Flush()
}

func (w *progressWriter) Flush() { _ = w.FlushError() }

// Hijack hands the connection over (an upgrade): from then on, its writes are the
// hijacker's to bound.
func (w *progressWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, brw, err := w.rc.Hijack()
	if err == nil {
		w.hijacked = true
	}
	return c, brw, err
}

func (w *progressWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish flushes what the handler left buffered within the timeout, and leaves the
// server the same time for its last writes (the end of the stream or of the chunked
// body), after which it gives up on the client.
func (w *progressWriter) finish() {
	w.mu.Lock()
	hijacked := w.hijacked
	w.mu.Unlock()
	if !hijacked {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
		_ = w.FlushError()
	}
}

// stop ends the timer: the handler returned, and the ResponseWriter is the server's again.
func (w *progressWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.timer.Stop()
	w.mu.Unlock()
}
