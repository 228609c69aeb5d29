package sigv4

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/kplug/kplug/internal/reverseproxy"
)

// MaxSignedBody is the largest request body a signer reads to hash; the API server refuses
// bodies of more than 3 MiB. Larger or streaming bodies are sent with an unsigned payload.
const MaxSignedBody = 3 << 20

// bufferBody reads req's body into memory and puts it back, so that it can be hashed and
// still be sent. It reports false, leaving the body alone, for upgrades, watches and
// follows (long-lived streams), and for bodies of unknown or too large a length.
func bufferBody(req *http.Request) ([]byte, bool, error) {
	if isStream(req) {
		return nil, false, nil
	}
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 {
		return []byte{}, true, nil
	}
	if req.ContentLength < 0 || req.ContentLength > MaxSignedBody {
		return nil, false, nil
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, req.ContentLength+1))
	_ = req.Body.Close()
	if err != nil {
		return nil, false, fmt.Errorf("reading the request body to sign it: %w", err)
	}
	if int64(len(b)) != req.ContentLength {
		return nil, false, fmt.Errorf("request body has %d bytes, Content-Length says %d", len(b), req.ContentLength)
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return b, true, nil
}

// isStream reports whether req opens a long-lived stream: a protocol upgrade (exec,
// attach, port-forward), a watch, or a followed log.
func isStream(req *http.Request) bool {
	if reverseproxy.IsUpgrade(req) {
		return true
	}
	q := req.URL.Query()
	return q.Get("watch") == "true" || q.Get("watch") == "1" || q.Get("follow") == "true"
}

// protectedHeader reports whether a header (lowercase name) carries identity or
// authorization, or changes what an upgraded stream means, and must therefore be covered
// by a signature whenever it is present: an intermediary must not be able to add an
// Impersonate-User header to a signed request (the lesson of KEP-6308).
func protectedHeader(name string) bool {
	switch name {
	case "authorization", "content-type", "content-digest",
		"sec-websocket-protocol", "x-stream-protocol-version":
		return true
	}
	return strings.HasPrefix(name, "impersonate-") || strings.HasPrefix(name, "x-remote-")
}
