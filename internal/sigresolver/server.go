package sigresolver

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/httpsig/resolverapi"
)

// NonceStore is where accepted nonces are recorded (noncestore.Memory, or etcd for
// several replicas). Consume is an atomic check-and-record; an error (the store cannot be
// reached) fails the call, so the verifier refuses the request.
type NonceStore interface {
	Consume(ctx context.Context, keyID, nonce string, expires time.Time) (accepted bool, reason string, err error)
}

// Resolver serves the resolver protocol from a key file, which it reads again when its
// modification time or size changes; a change that does not load is logged and the keys
// already loaded stay in use.
type Resolver struct {
	path   string
	nonces NonceStore
	log    *slog.Logger

	mu    sync.Mutex
	keys  *keySet
	stamp fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// New loads the key file at path; nonces may be nil for a resolver whose verifiers
// ignore nonces (nonceHandling: Ignore).
func New(path string, nonces NonceStore, log *slog.Logger) (*Resolver, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Resolver{path: path, nonces: nonces, log: log}
	st, err := stampOf(path)
	if err != nil {
		return nil, err
	}
	keys, err := loadKeys(path)
	if err != nil {
		return nil, err
	}
	r.keys, r.stamp = keys, st
	log.Info("signature resolver: keys loaded", "file", path, "keys", len(keys.byID), "ladder", keys.ladder != nil)
	if fi, err := os.Stat(path); err == nil && runtime.GOOS != "windows" && fi.Mode().Perm()&0o004 != 0 {
		log.Warn("signature resolver: the key file is readable by every user; it holds shared secrets: chmod o-r it", "file", path, "mode", fi.Mode().Perm().String())
	}
	return r, nil
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// current is the key set, read again first if the file changed.
func (r *Resolver) current() *keySet {
	st, err := stampOf(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if r.stamp != (fileStamp{}) {
			// Logged once per disappearance (issue 31 review, I6): the keys already
			// loaded are still served, including any the operator meant to remove.
			r.log.Error("signature resolver: the key file cannot be read; keeping the keys already loaded", "file", r.path, "err", err)
			r.stamp = fileStamp{}
		}
		return r.keys
	}
	if st == r.stamp {
		return r.keys
	}
	keys, err := loadKeys(r.path)
	if err != nil {
		r.log.Error("signature resolver: the key file changed and does not load; keeping the keys already loaded", "file", r.path, "err", err)
		r.stamp = st // logged once per change
		return r.keys
	}
	r.keys, r.stamp = keys, st
	r.log.Info("signature resolver: keys reloaded", "file", r.path, "keys", len(keys.byID))
	return keys
}

// Metadata states the ladder.
func (r *Resolver) Metadata(context.Context, *resolverapi.MetadataRequest) (*resolverapi.MetadataResponse, error) {
	resp := &resolverapi.MetadataResponse{KeyDerivation: resolverapi.KeyDerivationOf(r.current().ladder)}
	return resp, nil
}

// ResolveKey answers with the key's material and user, or NotFound.
func (r *Resolver) ResolveKey(_ context.Context, req *resolverapi.ResolveKeyRequest) (*resolverapi.ResolveKeyResponse, error) {
	set := r.current()
	k := set.lookup(req.GetKeyId())
	if k == nil {
		return nil, status.Error(codes.NotFound, "no such key")
	}
	resp := &resolverapi.ResolveKeyResponse{
		Algorithm:       k.algorithm,
		CacheTtlSeconds: int64(k.cacheTTL / time.Second),
		User:            &resolverapi.UserInfo{Username: k.user.Username, Uid: k.user.UID, Groups: k.user.Groups},
	}
	for name, values := range k.user.Extra {
		if resp.User.Extra == nil {
			resp.User.Extra = map[string]*resolverapi.ExtraValue{}
		}
		resp.User.Extra[name] = &resolverapi.ExtraValue{Items: values}
	}
	switch {
	case k.publicKeyDER != nil:
		resp.Material = &resolverapi.ResolveKeyResponse_PublicKey{PublicKey: k.publicKeyDER}
	case k.derived:
		dk, err := staged(set.ladder, k, req.GetCreated())
		if err != nil {
			return nil, status.Errorf(codes.Internal, "key %q: %v", k.keyID, err)
		}
		resp.Material = &resolverapi.ResolveKeyResponse_DerivedKey{DerivedKey: dk}
	default:
		resp.Material = &resolverapi.ResolveKeyResponse_Secret{Secret: k.secret}
	}
	return resp, nil
}

// ConsumeNonce records an accepted signature's nonce.
func (r *Resolver) ConsumeNonce(ctx context.Context, req *resolverapi.ConsumeNonceRequest) (*resolverapi.ConsumeNonceResponse, error) {
	switch {
	case r.nonces == nil:
		return nil, status.Error(codes.Unimplemented, "this resolver records no nonces: configure the verifier with nonceHandling: Ignore, or start the resolver with a nonce store")
	case req.GetKeyId() == "" || req.GetNonce() == "":
		return nil, status.Error(codes.InvalidArgument, "key_id and nonce are required")
	case req.GetExpiresAt() == nil:
		return nil, status.Error(codes.InvalidArgument, "expires_at is required: it says when the nonce may be forgotten")
	}
	ok, reason, err := r.nonces.Consume(ctx, req.GetKeyId(), req.GetNonce(), req.GetExpiresAt().AsTime())
	if err != nil {
		// A store that cannot be reached is an outage, not a replay: the gRPC status says
		// so, and the verifier refuses the request either way.
		return nil, status.Errorf(codes.Unavailable, "the nonce store: %v", err)
	}
	if !ok {
		r.log.Info("signature resolver: nonce refused", "keyID", req.GetKeyId(), "reason", reason)
	}
	return &resolverapi.ConsumeNonceResponse{Accepted: ok, Reason: reason}, nil
}

// staged is what a verifier is sent of a derived key: for a signature created at created,
// the key folded through the ladder's last date or scope step, with that date asserted, so
// that the verifier holds only a key for this key ID on this day, never the root secret
// (an AWS secret access key) or a rung it could derive other days' keys from, and folds
// one literal step per request instead of the whole ladder. A key already staged at or
// after that step, or a request without created, is sent as it is stored.
func staged(l *httpsig.Ladder, k *key, created *timestamppb.Timestamp) (*resolverapi.DerivedKey, error) {
	stored := &resolverapi.DerivedKey{Key: k.secret, From: k.from, Scope: k.scope}
	last := -1
	for i, s := range l.Steps {
		if s.Literal == "" {
			last = i
		}
	}
	if created == nil || last < 0 || k.from != "" && l.Step(k.from) >= last {
		return stored, nil
	}
	at := created.AsTime()
	values := map[string]string{}
	for _, s := range l.Steps {
		if s.Scope {
			values[s.Name] = k.scope[s.Name]
		}
	}
	rung, err := l.Rung(k.secret, k.from, l.Steps[last].Name, at, values)
	if err != nil {
		return nil, err
	}
	out := &resolverapi.DerivedKey{Key: rung, From: l.Steps[last].Name, Scope: map[string]string{}}
	from := l.Step(k.from) // -1 for the root
	for i, s := range l.Steps[:last+1] {
		switch {
		case s.Scope:
			out.Scope[s.Name] = values[s.Name]
		case s.Date != "" && i <= from:
			out.Scope[s.Name] = k.scope[s.Name] // the date the stored rung was derived for
		case s.Date == httpsig.LadderDateDashed:
			out.Scope[s.Name] = at.UTC().Format("2006-01-02")
		case s.Date != "":
			out.Scope[s.Name] = at.UTC().Format("20060102")
		}
	}
	return out, nil
}
