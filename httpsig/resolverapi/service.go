// Package resolverapi is the KEP-6308 key resolver protocol: the messages (api.proto,
// generated into api.pb.go) and the gRPC service ExternalHTTPSignatureService, with the
// package, service and method names kube-apiserver's prototype uses, so that a resolver
// written for either serves both. The service is written here by hand, as a
// grpc.ServiceDesc, so that no second code generator is needed.
package resolverapi

import (
	"context"

	"google.golang.org/grpc"
)

// ServiceName is the gRPC service's full name.
const ServiceName = "v1alpha1.ExternalHTTPSignatureService"

// Full method names, as gRPC sends them.
const (
	MetadataMethod     = "/" + ServiceName + "/Metadata"
	ResolveKeyMethod   = "/" + ServiceName + "/ResolveKey"
	ConsumeNonceMethod = "/" + ServiceName + "/ConsumeNonce"
)

// Server is what a resolver implements.
type Server interface {
	Metadata(context.Context, *MetadataRequest) (*MetadataResponse, error)
	// ResolveKey returns codes.NotFound for a key ID the resolver does not serve.
	ResolveKey(context.Context, *ResolveKeyRequest) (*ResolveKeyResponse, error)
	// ConsumeNonce is an atomic check-and-record.
	ConsumeNonce(context.Context, *ConsumeNonceRequest) (*ConsumeNonceResponse, error)
}

// Register serves srv's methods on s.
func Register(s grpc.ServiceRegistrar, srv Server) {
	s.RegisterService(&serviceDesc, srv)
}

func unary[Req any, Resp any](call func(Server, context.Context, *Req) (*Resp, error), method string) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: method[len(ServiceName)+2:],
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			req := new(Req)
			if err := dec(req); err != nil {
				return nil, err
			}
			if interceptor == nil {
				return call(srv.(Server), ctx, req)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: method}
			return interceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
				return call(srv.(Server), ctx, req.(*Req))
			})
		},
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*Server)(nil),
	Methods: []grpc.MethodDesc{
		unary(Server.Metadata, MetadataMethod),
		unary(Server.ResolveKey, ResolveKeyMethod),
		unary(Server.ConsumeNonce, ConsumeNonceMethod),
	},
	Metadata: "httpsig/resolverapi/api.proto",
}

// Client calls a resolver over conn.
type Client struct{ conn grpc.ClientConnInterface }

// NewClient returns a Client over conn.
func NewClient(conn grpc.ClientConnInterface) *Client { return &Client{conn: conn} }

// Metadata calls Metadata.
func (c *Client) Metadata(ctx context.Context, req *MetadataRequest, opts ...grpc.CallOption) (*MetadataResponse, error) {
	resp := new(MetadataResponse)
	return resp, c.conn.Invoke(ctx, MetadataMethod, req, resp, opts...)
}

// ResolveKey calls ResolveKey.
func (c *Client) ResolveKey(ctx context.Context, req *ResolveKeyRequest, opts ...grpc.CallOption) (*ResolveKeyResponse, error) {
	resp := new(ResolveKeyResponse)
	return resp, c.conn.Invoke(ctx, ResolveKeyMethod, req, resp, opts...)
}

// ConsumeNonce calls ConsumeNonce.
func (c *Client) ConsumeNonce(ctx context.Context, req *ConsumeNonceRequest, opts ...grpc.CallOption) (*ConsumeNonceResponse, error) {
	resp := new(ConsumeNonceResponse)
	return resp, c.conn.Invoke(ctx, ConsumeNonceMethod, req, resp, opts...)
}
