package httpsig

import (
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"sync"

	"github.com/dunglas/httpsfv"
)

// contentDigestHeader carries the body digest (RFC 9530).
const contentDigestHeader = "Content-Digest"

// errBodyTooLarge is a body over MaxBodyBytes.
var errBodyTooLarge = fmt.Errorf("request body is over %d bytes, kube-apiserver's limit", MaxBodyBytes)

// BodyReserver is implemented by a request body whose reader accounts for the memory a
// body takes once buffered, such as a server's budget across requests. Verify (or Sign)
// buffers a body in chunks of at most 64 KiB, each allocated as the bytes arrive, and
// calls Reserve with a chunk's size before it allocates the chunk: what is reserved
// follows what the client has sent, not the Content-Length it announced (which a
// signature does not cover). A verifier reads a body only once a signature covering its
// digest has verified under a key resolve trusted. An error stops Verify, which returns
// it as it is (not as an *Error: the request was not refused, the server is busy), and
// nothing more is read.
type BodyReserver interface {
	Reserve(n int64) error
}

// bodyChunk is the most of a body buffered (and reserved) at a time.
const bodyChunk = 64 << 10

// reserveError is a BodyReserver's refusal, kept apart from errors reading the body.
type reserveError struct{ err error }

func (e *reserveError) Error() string { return e.err.Error() }
func (e *reserveError) Unwrap() error { return e.err }

// errBodyReleased is a read of a body after ReleaseBody.
var errBodyReleased = errors.New("httpsig: the buffered request body was released")

// heldBody is a body read whole, in chunks, until it is released and no reader is
// midway through it.
type heldBody struct {
	mu       sync.Mutex
	chunks   [][]byte // nil once dropped
	size     int64
	open     int // readers neither closed nor at the end
	released bool
}

// writeTo writes the body to h (a digest); a nil body is empty.
func (b *heldBody) writeTo(h hash.Hash) {
	if b == nil {
		return
	}
	for _, c := range b.chunks {
		_, _ = h.Write(c) // a hash.Hash never fails
	}
}

// reader returns a new reader from the body's start, or an error once it was released.
func (b *heldBody) reader() (*bodyReader, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return nil, errBodyReleased
	}
	b.open++
	return &bodyReader{b: b}, nil
}

// dropIfIdle drops the bytes of a released body no reader is midway through. b.mu is held.
func (b *heldBody) dropIfIdle() {
	if b.released && b.open == 0 {
		b.chunks = nil
	}
}

// ReleaseBody drops the bytes of a body that Verify or Sign buffered: body is the request's
// Body after either (or one its GetBody returned). A reader midway through it (a transport
// still sending it) reads on to the end, and the bytes go when it is closed or done; any
// other read, and GetBody, fail from then on. A server that has forwarded the request
// calls it once the upstream has answered, so that the bytes go then, not when the
// response has been written to the client. Any other body is left alone.
func ReleaseBody(body io.Reader) {
	r, ok := body.(*bodyReader)
	if !ok {
		return
	}
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	r.b.released = true
	r.b.dropIfIdle()
}

// bodyReader reads a heldBody from its start.
type bodyReader struct {
	b      *heldBody
	i, off int  // the next byte: chunk i, at off
	done   bool // closed or at the end: no longer counted in open
	eof    bool // at the end
}

// finish stops counting r as midway. r.b.mu is held.
func (r *bodyReader) finish() {
	if !r.done {
		r.done = true
		r.b.open--
		r.b.dropIfIdle()
	}
}

func (r *bodyReader) Read(p []byte) (int, error) {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	switch {
	case r.eof:
		return 0, io.EOF
	case r.done:
		return 0, http.ErrBodyReadAfterClose
	}
	n := 0
	for n < len(p) && r.i < len(r.b.chunks) {
		k := copy(p[n:], r.b.chunks[r.i][r.off:])
		n += k
		if r.off += k; r.off == len(r.b.chunks[r.i]) {
			r.i, r.off = r.i+1, 0
		}
	}
	if r.i == len(r.b.chunks) {
		r.eof = true
		r.finish()
		if n == 0 {
			return 0, io.EOF
		}
	}
	return n, nil
}

func (r *bodyReader) Close() error {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	r.finish()
	return nil
}

// readBody reads req's body, at most MaxBodyBytes, and puts it back so that the request
// can still be sent, retried (GetBody) or forwarded. A larger body is refused and left
// readable from its start. A request without a body gives nil. The body is held in chunks,
// each reserved (BodyReserver) before it is allocated, and none larger than what the
// Content-Length leaves to come.
func readBody(req *http.Request) (*heldBody, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.ContentLength > MaxBodyBytes {
		return nil, errBodyTooLarge
	}
	orig := req.Body
	reserver, _ := orig.(BodyReserver)
	// One more byte than the body: room to see its end.
	left := int64(MaxBodyBytes) + 1
	if req.ContentLength > 0 { // 0 with a body is "unknown" in a client request
		left = req.ContentLength + 1
	}
	b := &heldBody{}
	lr := io.LimitReader(orig, MaxBodyBytes+1)
	for left > 0 {
		n := min(left, bodyChunk)
		if reserver != nil {
			if err := reserver.Reserve(n); err != nil {
				return nil, &reserveError{err}
			}
		}
		c := make([]byte, n)
		k, err := io.ReadFull(lr, c)
		if k > 0 {
			b.chunks = append(b.chunks, c[:k])
			b.size += int64(k)
		}
		left -= int64(k)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			_ = orig.Close()
			req.Body = http.NoBody
			return nil, fmt.Errorf("reading the request body: %w", err)
		}
		if left == 0 && b.size <= MaxBodyBytes { // the Content-Length was short: read on
			left = MaxBodyBytes + 1 - b.size
		}
	}
	if b.size > MaxBodyBytes {
		r, _ := b.reader()
		req.Body = readCloser{io.MultiReader(r, orig), orig}
		return nil, errBodyTooLarge
	}
	_ = orig.Close()
	if b.size == 0 {
		req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
		return nil, nil
	}
	req.Body, _ = b.reader()
	req.GetBody = func() (io.ReadCloser, error) {
		r, err := b.reader()
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	req.ContentLength = b.size
	return b, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// contentDigest is the Content-Digest value for body: its SHA-256 (RFC 9530 §2).
func contentDigest(body *heldBody) string {
	h := sha256.New()
	body.writeTo(h)
	return "sha-256=:" + base64.StdEncoding.EncodeToString(h.Sum(nil)) + ":"
}

// checkContentDigest checks a received Content-Digest against the body: every sha-256 and
// sha-512 entry must match, and there must be one. Other algorithms are ignored (RFC 9530
// §2 lets a recipient pick).
func checkContentDigest(values []string, body *heldBody) error {
	d, err := httpsfv.UnmarshalDictionary(values)
	if err != nil {
		return fmt.Errorf("Content-Digest is not a structured field dictionary: %w", err)
	}
	checked := 0
	for _, alg := range d.Names() {
		var h hash.Hash
		switch alg {
		case "sha-256":
			h = sha256.New()
		case "sha-512":
			h = sha512.New()
		default:
			continue
		}
		body.writeTo(h)
		want := h.Sum(nil)
		m, _ := d.Get(alg)
		item, ok := m.(httpsfv.Item)
		got, isBytes := item.Value.([]byte)
		if !ok || !isBytes {
			return fmt.Errorf("Content-Digest %s is not a byte sequence", alg)
		}
		if subtle.ConstantTimeCompare(got, want) != 1 {
			return fmt.Errorf("Content-Digest %s does not match the body", alg)
		}
		checked++
	}
	if checked == 0 {
		return errors.New("Content-Digest has no sha-256 or sha-512 digest")
	}
	return nil
}
