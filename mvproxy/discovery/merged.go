package discovery

import (
	"bytes"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/internal/reverseproxy"
)

// MergedHandler serves the peer-aggregated /apis document and caches it. For each request
// it first asks Local, as the caller, for the local server's own document (with
// If-None-Match for the last one's ETag, and without the caller's Accept-Encoding, since it
// reads the document itself), so that only callers allowed to read discovery get the
// merge (a 401 or 403 passes through) and the local part is never stale. It then merges
// the peers' groups into it (see Merge), or reuses the last merge while neither the local
// document nor the peers' generation changed.
//
// When no peer adds anything the answer is the local document with the local server's own
// ETag; otherwise the ETag is computed as kube-apiserver computes it (see Encode). Either
// way it answers If-None-Match with 304.
//
// It answers every request as a GET /apis that negotiated Merged or MergedProtobuf (see
// Negotiate): the latter gets the same document, with the same ETag, in protobuf
// (EncodeProtobuf), encoded once per merge. HEAD gets no body. Local and Peers are required. Its fields must not change once in use; it
// is safe for concurrent use.
type MergedHandler struct {
	// Local serves the local server's own aggregated discovery document (AcceptNoPeer).
	Local http.Handler
	// Peers returns the peers' /apis documents and a generation that changes whenever any
	// of them does, the key of the cache (mvproxy.Directory.PeerGroups).
	Peers func() (generation uint64, peers []ServerGroups)
	// Observe, if set, is told for each answer whether it came from the cached merge.
	Observe func(hit bool)
	// Logger receives a line when the local document cannot be read or merged; nil
	// discards.
	Logger *slog.Logger

	cached atomic.Pointer[mergedEntry]
	mu     sync.Mutex // serialises merges
}

// mergedEntry is a cached peer-aggregated document.
type mergedEntry struct {
	localETag  string
	local      []byte // the local document, to merge again when only peers changed
	generation uint64
	list       *apidiscoveryv2.APIGroupDiscoveryList
	body       []byte // JSON
	etag       string

	protobufOnce sync.Once
	protobuf     []byte
	protobufErr  error
}

// protobufBody returns the document in protobuf, encoding it on first use.
func (e *mergedEntry) protobufBody() ([]byte, error) {
	e.protobufOnce.Do(func() { e.protobuf, e.protobufErr = EncodeProtobuf(e.list) })
	return e.protobuf, e.protobufErr
}

// ServeHTTP implements http.Handler.
func (h *MergedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cached := h.cached.Load()
	lr := r.Clone(r.Context())
	lr.Method = http.MethodGet
	lr.Header.Set("Accept", AcceptNoPeer)
	lr.Header.Del("If-None-Match")
	// The local document is read here, not relayed: with the client's Accept-Encoding, a
	// large document would come back gzipped.
	lr.Header.Del("Accept-Encoding")
	if cached != nil {
		lr.Header.Set("If-None-Match", cached.localETag)
	}
	rec := reverseproxy.NewCapture()
	h.Local.ServeHTTP(rec, lr)

	generation, peers := h.Peers()
	var entry *mergedEntry
	switch {
	case rec.Code() == http.StatusNotModified && cached != nil && cached.generation == generation:
		entry = cached
		h.observe(true)
	case rec.Code() == http.StatusNotModified && cached != nil:
		entry = h.merge(cached.localETag, cached.local, generation, peers)
	case rec.Code() == http.StatusOK:
		localETag := rec.Header().Get("ETag")
		if cached != nil && localETag != "" && localETag == cached.localETag && cached.generation == generation {
			entry = cached
			h.observe(true)
			break
		}
		body, err := rec.DecodedBody(maxDocumentBytes)
		if err != nil {
			h.logger().Error("reading the local aggregated discovery document", "err", err)
			break
		}
		entry = h.merge(localETag, body, generation, peers)
	default:
		rec.CopyTo(w) // 401, 403, 5xx: the caller gets the local server's answer
		return
	}
	if entry == nil {
		reverseproxy.WriteStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError,
			"mvproxy: the local server's aggregated discovery document could not be merged; see the proxy's log", 0)
		return
	}
	body, contentType := entry.body, AcceptAggregated
	if answer, _ := Negotiate(r.Header.Get("Accept")); answer == MergedProtobuf {
		pb, err := entry.protobufBody()
		if err != nil {
			h.logger().Error("encoding merged discovery as protobuf", "err", err)
			reverseproxy.WriteStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError,
				"mvproxy: the merged aggregated discovery document could not be encoded as protobuf; see the proxy's log", 0)
			return
		}
		body, contentType = pb, AcceptAggregatedProtobuf
	}
	hdr := w.Header()
	hdr.Set("Content-Type", contentType)
	hdr.Set("ETag", entry.etag)
	hdr.Set("Vary", "Accept")
	hdr.Set("Cache-Control", "public")
	if r.Header.Get("If-None-Match") == entry.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// merge builds and caches the merged document; nil if the local document is unreadable.
// When no peer adds anything, the document is the local server's own, with its ETag, so
// that a client sees the same ETag as from the local kube-apiserver.
func (h *MergedHandler) merge(localETag string, localBody []byte, generation uint64, peers []ServerGroups) *mergedEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.observe(false)
	local, err := Parse(localBody)
	if err != nil {
		h.logger().Error("local aggregated discovery unreadable", "err", err)
		return nil
	}
	e := &mergedEntry{localETag: localETag, local: bytes.Clone(localBody), generation: generation}
	merged, added := merge(local, peers)
	e.list = merged
	if !added && localETag != "" {
		e.body, e.etag = e.local, localETag
	} else if e.body, e.etag, err = Encode(merged); err != nil {
		h.logger().Error("encoding merged discovery", "err", err)
		return nil
	}
	if e.localETag == "" {
		_, e.localETag, _ = Encode(local)
	}
	h.cached.Store(e)
	return e
}

func (h *MergedHandler) observe(hit bool) {
	if h.Observe != nil {
		h.Observe(hit)
	}
}

func (h *MergedHandler) logger() *slog.Logger {
	if h.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Logger
}
