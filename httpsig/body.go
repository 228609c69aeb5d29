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

// readBody reads req's body, at most MaxBodyBytes, and puts it back so that the request
// can still be sent, retried (GetBody) or forwarded. A larger body is refused and left
// readable from its start. A request without a body gives nil.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.ContentLength > MaxBodyBytes {
		return nil, errBodyTooLarge
	}
	orig := req.Body
	b, err := io.ReadAll(io.LimitReader(orig, MaxBodyBytes+1))
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
