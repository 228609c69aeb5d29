package httpsig

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/dunglas/httpsfv"
)

// contentDigestHeader carries the body digest (RFC 9530).
const contentDigestHeader = "Content-Digest"

// errBodyTooLarge is a body over MaxBodyBytes.
var errBodyTooLarge = fmt.Errorf("request body is over %d bytes, kube-apiserver's limit", MaxBodyBytes)

// BodyReserver is implemented by a request body whose reader accounts for the memory a
// body takes once buffered whole, such as a server's budget across requests. Before it
// buffers a body, Verify (or Sign) calls Reserve with the bytes it is about to hold: the
// Content-Length plus one, or MaxBodyBytes plus one when the length is unknown. A
// verifier reads a body only once a signature covering its digest has verified under a
// key resolve trusted. An error stops Verify, which returns it as it is (not as an
// *Error: the request was not refused, the server is busy), and nothing is read.
type BodyReserver interface {
	Reserve(n int64) error
}

// reserveError is a BodyReserver's refusal, kept apart from errors reading the body.
type reserveError struct{ err error }

func (e *reserveError) Error() string { return e.err.Error() }
func (e *reserveError) Unwrap() error { return e.err }

// readBody reads req's body, at most MaxBodyBytes, and puts it back so that the request
// can still be sent, retried (GetBody) or forwarded. A larger body is refused and left
// readable from its start. A request without a body gives nil. A body of known length is
// read into one buffer of that size, so that what it holds is what a BodyReserver was
// told.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.ContentLength > MaxBodyBytes {
		return nil, errBodyTooLarge
	}
	orig := req.Body
	// One more byte than the body: room to see its end without growing the buffer.
	size := int64(MaxBodyBytes) + 1
	if req.ContentLength > 0 { // 0 with a body is "unknown" in a client request
		size = req.ContentLength + 1
	}
	if r, ok := orig.(BodyReserver); ok {
		if err := r.Reserve(size); err != nil {
			return nil, &reserveError{err}
		}
	}
	var initial int64 = 512
	if req.ContentLength > 0 {
		initial = size
	}
	b, err := readAll(io.LimitReader(orig, MaxBodyBytes+1), initial)
	if err != nil {
		_ = orig.Close()
		req.Body = http.NoBody
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	if len(b) > MaxBodyBytes {
		req.Body = readCloser{io.MultiReader(bytes.NewReader(b), orig), orig}
		return nil, errBodyTooLarge
	}
	_ = orig.Close()
	if len(b) == 0 {
		req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
		return nil, nil
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	req.ContentLength = int64(len(b))
	return b, nil
}

// readAll is io.ReadAll starting from a buffer of capacity initial, which it grows only
// if r holds more.
func readAll(r io.Reader, initial int64) ([]byte, error) {
	b := make([]byte, 0, initial)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}

// contentDigest is the Content-Digest value for body: its SHA-256 (RFC 9530 §2).
func contentDigest(body []byte) string {
	d := sha256.Sum256(body)
	return "sha-256=:" + base64.StdEncoding.EncodeToString(d[:]) + ":"
}

// checkContentDigest checks a received Content-Digest against the body: every sha-256 and
// sha-512 entry must match, and there must be one. Other algorithms are ignored (RFC 9530
// §2 lets a recipient pick).
func checkContentDigest(values []string, body []byte) error {
	d, err := httpsfv.UnmarshalDictionary(values)
	if err != nil {
		return fmt.Errorf("Content-Digest is not a structured field dictionary: %w", err)
	}
	checked := 0
	for _, alg := range d.Names() {
		var want []byte
		switch alg {
		case "sha-256":
			s := sha256.Sum256(body)
			want = s[:]
		case "sha-512":
			s := sha512.Sum512(body)
			want = s[:]
		default:
			continue
		}
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
