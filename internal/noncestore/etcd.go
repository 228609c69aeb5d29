package noncestore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Etcd is a nonce store in etcd, shared by every replica of a resolver (and so by every
// verifier that asks them): a key per key ID and nonce, created only if absent in one
// transaction (the atomic check-and-record), with a lease that ends no earlier than the
// nonce's expiry, so etcd forgets it once no signature bearing it can be accepted. Leases
// are shared by the nonces that expire in the same second, so that a request costs one
// transaction, not a lease grant as well. If etcd cannot be reached, Consume fails: a
// resolver must then refuse, never accept.
//
// It speaks etcd's v3 JSON gateway (POST /v3/kv/txn, /v3/lease/grant, served on every
// client URL) over net/http rather than gRPC through go.etcd.io/etcd/client/v3: two calls
// do not need etcd's client, and its generated API packages cost every kplug command
// about 3 ms at start, a warm `kplug exec-cache` hit included. Make one with DialEtcd;
// it is safe for concurrent use.
type Etcd struct {
	prefix    string
	endpoints []string // client URLs, without a trailing slash
	client    *http.Client

	current atomic.Int64 // the endpoint that answered last

	mu     sync.Mutex
	leases map[int64]int64 // expiry (unix second) -> ID of the lease ending then
}

// Consume records nonce for keyID until expires, and reports whether it was new.
func (e *Etcd) Consume(ctx context.Context, keyID, nonce string, expires time.Time) (bool, string, error) {
	lease, err := e.lease(ctx, expires)
	if err != nil {
		return false, "", err
	}
	k := base64.StdEncoding.EncodeToString([]byte(e.key(keyID, nonce)))
	// Put the key with the lease if nothing ever created it (create_revision 0).
	txn := map[string]any{
		"compare": []any{map[string]any{"result": "EQUAL", "target": "CREATE", "key": k, "create_revision": "0"}},
		"success": []any{map[string]any{"request_put": map[string]any{"key": k, "lease": strconv.FormatInt(lease, 10)}}},
	}
	var resp struct {
		Header    json.RawMessage `json:"header"`
		Succeeded bool            `json:"succeeded"` // absent when false: proto3's JSON leaves defaults out
	}
	if err := e.call(ctx, "/v3/kv/txn", txn, &resp, false); err != nil {
		return false, "", fmt.Errorf("recording the nonce in etcd: %w", err)
	}
	if len(resp.Header) == 0 {
		// Not an answer to a transaction (an error object, or a proxy's), though it says
		// nothing succeeded: an outage, not a replay (issue 33 review 2, E2).
		return false, "", errors.New("recording the nonce in etcd: etcd's answer is not a transaction's (no header)")
	}
	if !resp.Succeeded {
		return false, "the nonce was already used with this key", nil
	}
	return true, "", nil
}

// key names a record by digests of the key ID and the nonce: both are client-chosen, and
// a digest bounds the key's size and keeps "/" out of it.
func (e *Etcd) key(keyID, nonce string) string {
	prefix := e.prefix
	if prefix == "" {
		prefix = "/kplug/nonces/"
	}
	k := sha256.Sum256([]byte(keyID))
	n := sha256.Sum256([]byte(nonce))
	return prefix + hex.EncodeToString(k[:16]) + "/" + hex.EncodeToString(n[:16])
}

// lease returns a lease that ends at the first whole second at or after expires (etcd
// may keep it a little longer, never shorter), granting one if none does yet.
func (e *Etcd) lease(ctx context.Context, expires time.Time) (int64, error) {
	at := expires.Unix()
	if expires.After(time.Unix(at, 0)) {
		at++
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leases == nil {
		e.leases = map[int64]int64{}
	}
	now := time.Now().Unix()
	for sec := range e.leases {
		if sec < now {
			delete(e.leases, sec) // its records are gone, or about to be
		}
	}
	if id, ok := e.leases[at]; ok {
		return id, nil
	}
	// The TTL counts from the grant; a second more covers the grant's own delay.
	ttl := max(at-now+1, 2)
	var resp struct {
		ID    int64  `json:"ID,string"`
		Error string `json:"error"`
	}
	if err := e.call(ctx, "/v3/lease/grant", map[string]string{"TTL": strconv.FormatInt(ttl, 10)}, &resp, true); err != nil {
		return 0, fmt.Errorf("granting an etcd lease for nonces: %w", err)
	}
	if resp.Error != "" || resp.ID == 0 {
		return 0, fmt.Errorf("granting an etcd lease for nonces: etcd granted no lease: %q", resp.Error)
	}
	e.leases[at] = resp.ID
	return resp.ID, nil
}

// call posts req as JSON to path at the endpoint that answered last, and decodes the answer
// into resp. A request that may have reached etcd is sent again to the next endpoint only
// when it is idempotent (a lease grant: a spare lease expires unused); a transaction
// sent again would find its own record and refuse the nonce, so it moves on only when an
// endpoint could not be connected to. An endpoint that did not answer (hung, or its
// machine gone) is left for the next call either way, and an idempotent request gives
// each endpoint but the last half the time left, so that one hung member of a cluster
// costs a call, not all of them (issue 33 review 2, E1).
func (e *Etcd) call(ctx context.Context, path string, req, resp any, idempotent bool) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	first := int(e.current.Load())
	var errs []error
	for i := range e.endpoints {
		n := (first + i) % len(e.endpoints)
		actx, cancel := ctx, context.CancelFunc(func() {})
		if deadline, ok := ctx.Deadline(); ok && idempotent && i < len(e.endpoints)-1 {
			actx, cancel = context.WithTimeout(ctx, time.Until(deadline)/2)
		}
		answered, err := e.post(actx, e.endpoints[n]+path, body, resp)
		cancel()
		if err == nil {
			e.current.Store(int64(n))
			return nil
		}
		errs = append(errs, err)
		if !answered {
			e.current.CompareAndSwap(int64(n), int64((n+1)%len(e.endpoints)))
		}
		if ctx.Err() != nil || !notConnected(err) && (answered || !idempotent) {
			break
		}
	}
	return errors.Join(errs...)
}

// post sends one request; answered says whether etcd (or whatever listens there) sent an
// answer, even a refusal.
func (e *Etcd) post(ctx context.Context, u string, body []byte, resp any) (answered bool, _ error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := e.client.Do(hreq)
	if err != nil {
		return false, err
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, 1<<20))
	if err != nil {
		return false, fmt.Errorf("reading etcd's answer from %s: %w", u, err)
	}
	if hresp.StatusCode != http.StatusOK {
		var status struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &status) != nil || status.Message == "" {
			status.Message = strings.TrimSpace(string(data))
		}
		if len(status.Message) > 512 {
			status.Message = status.Message[:512] + "..." // etcd's text, bounded (issue 33 review 2, E4)
		}
		if hresp.StatusCode == http.StatusServiceUnavailable && gatewayConnectionFailed(status.Message) {
			// The gateway's own connection to etcd was refused, not ours.
			status.Message += "; etcd's JSON gateway connects to etcd with etcd's serving certificate (or --client-cert-file): with --client-cert-auth, that certificate must also be valid for client authentication"
		}
		return true, fmt.Errorf("etcd at %s answered %s: %s", u, hresp.Status, status.Message)
	}
	if err := json.Unmarshal(data, resp); err != nil {
		return true, fmt.Errorf("etcd at %s: decoding its answer: %w", u, err)
	}
	return true, nil
}

// gatewayConnectionFailed reports whether a 503's text is the JSON gateway's own gRPC
// connection to etcd failing its TLS handshake: etcd refuses the certificate ("bad
// certificate"), or closes the connection while the gateway writes ("broken pipe",
// "connection reset"), depending on timing.
func gatewayConnectionFailed(msg string) bool {
	for _, s := range []string{"bad certificate", "broken pipe", "connection reset", "server preface"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// notConnected reports whether err is a failure to connect, so that the request was not
// sent.
func notConnected(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// DialEtcd returns a nonce store in etcd at endpoints (client URLs), under prefix ("" for
// the default); close it when done. Dialing does not wait for etcd: an unreachable etcd
// fails each Consume, so the resolver refuses, and recovers with it. timeout bounds each
// connection attempt.
//
// tlsConfig, when set, is used for https endpoints (the server verified against its
// RootCAs, a client certificate presented). An http endpoint must be on loopback: over a
// network, whoever can change the records can replay every request they saw. etcd serves
// its JSON gateway by calling itself over gRPC, so with --client-cert-auth its serving
// certificate (or its --client-cert-file) must be valid for client authentication too, as
// kubeadm issues it.
func DialEtcd(_ context.Context, endpoints []string, prefix string, timeout time.Duration, tlsConfig *tls.Config) (*Etcd, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("no etcd endpoint")
	}
	trimmed := make([]string, len(endpoints))
	for i, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("etcd endpoint %q: want http(s)://host:port", e)
		}
		if u.Scheme == "http" && !isLoopback(u.Hostname()) {
			return nil, fmt.Errorf("etcd endpoint %q is plain http to another host: use https (with the etcd CA), or a loopback address", e)
		}
		trimmed[i] = strings.TrimSuffix(e, "/")
	}
	if tlsConfig != nil {
		tlsConfig = tlsConfig.Clone()
	}
	transport := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: timeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16, // a resolver's concurrent calls, kept for the next ones
		IdleConnTimeout:     90 * time.Second,
	}
	// No redirects: an answer comes from the endpoint configured, whose scheme was
	// checked above (issue 33 review 2, E3).
	noRedirects := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Etcd{prefix: prefix, endpoints: trimmed, client: &http.Client{Transport: transport, CheckRedirect: noRedirects}}, nil
}

// Close closes the store's idle connections to etcd.
func (e *Etcd) Close() error {
	e.client.CloseIdleConnections()
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
