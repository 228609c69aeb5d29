// Command sdk-proxy-plugin is an exec proxy plugin written with kplug's SDK
// (execproxy/server.Main), as a plugin author writes one: it authenticates the client's
// requests with the TLS client certificate its --client-cert and --client-key name. The
// load harness measures its daemon beside kplug's (make load, -load.only execproxy-sdk);
// it also serves net/http/pprof for the harness (internal/profiled).
package main

import (
	"context"
	"crypto/tls"
	"flag"

	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/test/load/internal/profiled"
)

func main() {
	profiled.Serve()
	server.Main(func(_ context.Context, req *server.Request) (*server.Options, func(), error) {
		fs := flag.NewFlagSet("sdk-proxy-plugin", flag.ContinueOnError)
		certFile := fs.String("client-cert", "", "PEM certificate for TLS client authentication")
		keyFile := fs.String("client-key", "", "its PEM key")
		if err := fs.Parse(req.Args); err != nil {
			return nil, nil, err
		}
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return nil, nil, err
		}
		return &server.Options{
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		}, nil, nil
	})
}
