package mvproxy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"sync"
)

// capture is an http.ResponseWriter that keeps the response, for the local discovery
// document the merge needs.
type capture struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func newCapture() *capture { return &capture{header: http.Header{}} }

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return c.body.Write(p)
}

// decodedBody returns the body without its content coding, at most limit bytes of it. Only
// gzip, the coding kube-apiserver uses, is understood.
func (c *capture) decodedBody(limit int64) ([]byte, error) {
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

func (c *capture) copyTo(w http.ResponseWriter) {
	for k, vs := range c.header {
		w.Header()[k] = vs
	}
	if c.code == 0 {
		c.code = http.StatusOK
	}
	w.WriteHeader(c.code)
	_, _ = w.Write(c.body.Bytes())
}

// slogErrorLog adapts a slog.Logger for httputil.ReverseProxy.ErrorLog.
func slogErrorLog(l *slog.Logger) *log.Logger {
	return slog.NewLogLogger(l.Handler(), slog.LevelWarn)
}

// bufferPool lends ReverseProxy its 32 KiB copy buffers instead of allocating one per
// response.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(s []byte) { b.p.Put(&s) }
