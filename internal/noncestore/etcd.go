package noncestore

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Etcd is a nonce store in etcd, shared by every replica of a resolver (and so by every
// verifier that asks them): a key per key ID and nonce, created only if absent in one
// transaction (the atomic check-and-record), with a lease that ends no earlier than the
// nonce's expiry, so etcd forgets it once no signature bearing it can be accepted. Leases
// are shared by the nonces that expire in the same second, so that a request costs one
// transaction, not a lease grant as well. If etcd cannot be reached, Consume fails: a
// resolver must then refuse, never accept.
type Etcd struct {
	Client *clientv3.Client
	// Prefix is put before every key; default "/kplug/nonces/".
	Prefix string

	mu     sync.Mutex
	leases map[int64]clientv3.LeaseID // expiry (unix second) -> lease ending then
}

// Consume records nonce for keyID until expires, and reports whether it was new.
func (e *Etcd) Consume(ctx context.Context, keyID, nonce string, expires time.Time) (bool, string, error) {
	lease, err := e.lease(ctx, expires)
	if err != nil {
		return false, "", err
	}
	k := e.key(keyID, nonce)
	resp, err := e.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, "", clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return false, "", fmt.Errorf("recording the nonce in etcd: %w", err)
	}
	if !resp.Succeeded {
		return false, "the nonce was already used with this key", nil
	}
	return true, "", nil
}

// key names a record by digests of the key ID and the nonce: both are client-chosen, and
// a digest bounds the key's size and keeps "/" out of it.
func (e *Etcd) key(keyID, nonce string) string {
	prefix := e.Prefix
	if prefix == "" {
		prefix = "/kplug/nonces/"
	}
	k := sha256.Sum256([]byte(keyID))
	n := sha256.Sum256([]byte(nonce))
	return prefix + hex.EncodeToString(k[:16]) + "/" + hex.EncodeToString(n[:16])
}

// lease returns a lease that ends at the first whole second at or after expires (etcd
// may keep it a little longer, never shorter), granting one if none does yet.
func (e *Etcd) lease(ctx context.Context, expires time.Time) (clientv3.LeaseID, error) {
	at := expires.Unix()
	if expires.After(time.Unix(at, 0)) {
		at++
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leases == nil {
		e.leases = map[int64]clientv3.LeaseID{}
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
	resp, err := e.Client.Grant(ctx, ttl)
	if err != nil {
		return 0, fmt.Errorf("granting an etcd lease for nonces: %w", err)
	}
	e.leases[at] = resp.ID
	return resp.ID, nil
}

// DialEtcd connects to etcd at endpoints (client URLs) for a nonce store under prefix
// ("" for the default); close the client when done. Dialing does not wait for etcd: an
// unreachable etcd fails each Consume, so the resolver refuses, and recovers with it.
//
// tlsConfig, when set, is used for https endpoints (the server verified against its
// RootCAs, a client certificate presented). An http endpoint must be on loopback: over a
// network, whoever can change the records can replay every request they saw.
func DialEtcd(ctx context.Context, endpoints []string, prefix string, timeout time.Duration, tlsConfig *tls.Config) (*Etcd, error) {
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("etcd endpoint %q: want http(s)://host:port", e)
		}
		if u.Scheme == "http" && !isLoopback(u.Hostname()) {
			return nil, fmt.Errorf("etcd endpoint %q is plain http to another host: use https (with the etcd CA), or a loopback address", e)
		}
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: timeout, Logger: zap.NewNop(), Context: ctx, TLS: tlsConfig})
	if err != nil {
		return nil, err
	}
	return &Etcd{Client: c, Prefix: prefix}, nil
}

// Close closes the etcd client.
func (e *Etcd) Close() error { return e.Client.Close() }

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
