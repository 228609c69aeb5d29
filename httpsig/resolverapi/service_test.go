package resolverapi_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplug/kplug/httpsig/resolverapi"
)

type fake struct{ nonces map[string]bool }

func (f *fake) Metadata(context.Context, *resolverapi.MetadataRequest) (*resolverapi.MetadataResponse, error) {
	return &resolverapi.MetadataResponse{RefreshHintSeconds: 7}, nil
}

func (f *fake) ResolveKey(_ context.Context, r *resolverapi.ResolveKeyRequest) (*resolverapi.ResolveKeyResponse, error) {
	if r.GetKeyId() != "corp/alice" {
		return nil, status.Error(codes.NotFound, "no such key")
	}
	return &resolverapi.ResolveKeyResponse{
		Algorithm: "hmac-sha256",
		Material:  &resolverapi.ResolveKeyResponse_Secret{Secret: []byte("s")},
		User:      &resolverapi.UserInfo{Username: "alice", Groups: []string{"dev"}},
	}, nil
}

func (f *fake) ConsumeNonce(_ context.Context, r *resolverapi.ConsumeNonceRequest) (*resolverapi.ConsumeNonceResponse, error) {
	k := r.GetKeyId() + "\x00" + r.GetNonce()
	if f.nonces[k] {
		return &resolverapi.ConsumeNonceResponse{Reason: "seen"}, nil
	}
	f.nonces[k] = true
	return &resolverapi.ConsumeNonceResponse{Accepted: true}, nil
}

// TestServiceOverAUnixSocket calls each method through a real gRPC server and client on
// a unix socket, with the method names the prototype's generated code uses.
func TestServiceOverAUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "r.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	resolverapi.Register(s, &fake{nonces: map[string]bool{}})
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := resolverapi.NewClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if m, err := c.Metadata(ctx, &resolverapi.MetadataRequest{}); err != nil || m.GetRefreshHintSeconds() != 7 {
		t.Fatalf("Metadata = %v, %v", m, err)
	}
	r, err := c.ResolveKey(ctx, &resolverapi.ResolveKeyRequest{KeyId: "corp/alice", Created: timestamppb.Now()})
	if err != nil || r.GetUser().GetUsername() != "alice" || string(r.GetSecret()) != "s" {
		t.Fatalf("ResolveKey = %v, %v", r, err)
	}
	if _, err := c.ResolveKey(ctx, &resolverapi.ResolveKeyRequest{KeyId: "corp/bob"}); status.Code(err) != codes.NotFound {
		t.Errorf("ResolveKey(unknown) = %v, want NotFound", err)
	}
	for i, want := range []bool{true, false} {
		n, err := c.ConsumeNonce(ctx, &resolverapi.ConsumeNonceRequest{KeyId: "corp/alice", Nonce: "n1"})
		if err != nil || n.GetAccepted() != want {
			t.Errorf("ConsumeNonce #%d = %v, %v; want accepted %v", i, n, err, want)
		}
	}
}
