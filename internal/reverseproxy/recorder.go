package reverseproxy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
)

// StatusRecorder passes a response on to the ResponseWriter it wraps and records its
// status code, for metrics and logs. Code is http.StatusOK until WriteHeader is called.
// Unwrap lets http.ResponseController reach Flush and Hijack of the wrapped writer.
type StatusRecorder struct {
	http.ResponseWriter
	Code int
}

// NewStatusRecorder wraps w.
func NewStatusRecorder(w http.ResponseWriter) *StatusRecorder {
	return &StatusRecorder{ResponseWriter: w, Code: http.StatusOK}
}

// WriteHeader records code and passes it on.
func (s *StatusRecorder) WriteHeader(code int) {
	s.Code = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap returns the wrapped writer.
func (s *StatusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Capture is an http.ResponseWriter that keeps the whole response in memory, for a
// handler whose answer the caller reads before answering its own client (the local
// discovery document a merge needs). Use NewCapture; it is not safe for concurrent use.
type Capture struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

// NewCapture returns an empty Capture.
func NewCapture() *Capture { return &Capture{header: http.Header{}} }

// Header implements http.ResponseWriter.
func (c *Capture) Header() http.Header { return c.header }

// WriteHeader implements http.ResponseWriter; only the first code counts.
func (c *Capture) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
}

// Write implements http.ResponseWriter.
func (c *Capture) Write(p []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return c.body.Write(p)
}

// Code is the status code written, 0 if the handler wrote nothing.
func (c *Capture) Code() int { return c.code }

// DecodedBody returns the body without its content coding, at most limit bytes of it.
// Only gzip, the coding kube-apiserver uses, is understood.
func (c *Capture) DecodedBody(limit int64) ([]byte, error) {
	var r io.Reader
	switch enc := c.header.Get("Content-Encoding"); enc {
	case "", "identity":
		r = bytes.NewReader(c.body.Bytes())
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(c.body.Bytes()))
		if err != nil {
			return nil, fmt.Errorf("decoding gzip response: %w", err)
		}
		r = zr
	default:
		return nil, fmt.Errorf("response with unsupported Content-Encoding %q", enc)
	}
	body, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("decoding gzip response: %w", err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("response larger than %d bytes", limit)
	}
	return body, nil
}

// CopyTo sends the captured response to w as it is.
func (c *Capture) CopyTo(w http.ResponseWriter) {
	for k, vs := range c.header {
		w.Header()[k] = vs
	}
	if c.code == 0 {
		c.code = http.StatusOK
	}
	w.WriteHeader(c.code)
	_, _ = w.Write(c.body.Bytes())
}
