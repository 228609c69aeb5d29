package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/kplug/kplug/httpsig/resolverapi"
	"github.com/kplug/kplug/internal/noncestore"
	"github.com/kplug/kplug/internal/privdir"
	"github.com/kplug/kplug/internal/sigresolver"
)

type signatureResolverOptions struct {
	keys, socket  string
	nonceStore    string
	maxNonces     int
	etcdEndpoints []string
	etcdPrefix    string
	etcdCA        string
	etcdCert      string
	etcdKey       string
	callTimeout   time.Duration
}

func newSignatureResolverCommand(g *globals) *cobra.Command {
	o := &signatureResolverOptions{}
	cmd := &cobra.Command{
		Use:   "signature-resolver --keys FILE --socket PATH",
		Short: "Reference KEP-6308 key resolver: keys from a file, nonces in memory or etcd, on a unix socket",
		Long: `signature-resolver serves KEP-6308's resolver protocol (Metadata, ResolveKey,
ConsumeNonce over gRPC, as kube-apiserver's prototype speaks it) on a unix socket, for
kplug signature-proxy and kube-apiserver: it answers which key verifies a key ID and whose
identity it is, from a key file it reads again when the file changes, and records the
nonces of accepted signatures, in memory (one replica) or in etcd (replicas sharing it).

The socket is created mode 0600 in a directory that must be the user's own and private:
whoever can connect to it can learn every key and record nonces. Each call is bounded by
--call-timeout.`,
		Example: `  kplug signature-resolver --keys /etc/kplug/resolver-keys.yaml --socket /run/kplug/resolver/resolver.sock
  kplug signature-resolver --keys keys.yaml --socket /run/kplug/resolver/resolver.sock \
      --nonce-store etcd --etcd-endpoints https://etcd-0:2379 \
      --etcd-cafile /etc/kplug/etcd/ca.crt --etcd-certfile /etc/kplug/etcd/client.crt --etcd-keyfile /etc/kplug/etcd/client.key`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), g) },
	}
	f := cmd.Flags()
	f.StringVar(&o.keys, "keys", "", "the key file (kind: SignatureResolverKeys); read again when it changes (required)")
	f.StringVar(&o.socket, "socket", "", "the unix socket to serve on, in a private directory of the user's (required)")
	f.StringVar(&o.nonceStore, "nonce-store", "memory", "where accepted nonces are recorded: memory (one replica), etcd (replicas sharing --etcd-endpoints) or none (verifiers must set nonceHandling: Ignore)")
	f.IntVar(&o.maxNonces, "max-nonces", 1_000_000, "--nonce-store memory: unexpired nonces held, a quarter of them at most per key ID; when full, nonces are refused, never forgotten")
	f.StringSliceVar(&o.etcdEndpoints, "etcd-endpoints", nil, "--nonce-store etcd: the etcd client URLs")
	f.StringVar(&o.etcdPrefix, "etcd-prefix", "/kplug/nonces/", "--nonce-store etcd: the key prefix of nonce records")
	f.StringVar(&o.etcdCA, "etcd-cafile", "", "--nonce-store etcd: the CA bundle that verifies etcd's serving certificate (default: the system's)")
	f.StringVar(&o.etcdCert, "etcd-certfile", "", "--nonce-store etcd: the client certificate presented to etcd")
	f.StringVar(&o.etcdKey, "etcd-keyfile", "", "--nonce-store etcd: the client certificate's key")
	f.DurationVar(&o.callTimeout, "call-timeout", 5*time.Second, "the longest one call may take, the nonce store's included")
	return cmd
}

func (o *signatureResolverOptions) run(ctx context.Context, g *globals) error {
	switch {
	case o.keys == "":
		return &usageError{err: errors.New("--keys is required: the key file"), showHelp: true}
	case o.socket == "":
		return &usageError{err: errors.New("--socket is required: the unix socket to serve on"), showHelp: true}
	case o.callTimeout <= 0:
		return &usageError{err: errors.New("--call-timeout must be positive"), showHelp: true}
	}
	var nonces sigresolver.NonceStore
	switch o.nonceStore {
	case "memory":
		if o.maxNonces <= 0 {
			return &usageError{err: errors.New("--max-nonces must be positive"), showHelp: true}
		}
		nonces = noncestore.NewMemory(o.maxNonces, nil)
	case "etcd":
		if len(o.etcdEndpoints) == 0 {
			return &usageError{err: errors.New("--nonce-store etcd needs --etcd-endpoints"), showHelp: true}
		}
		tlsConfig, err := o.etcdTLS()
		if err != nil {
			return invalidConfig(err)
		}
		e, err := noncestore.DialEtcd(ctx, o.etcdEndpoints, o.etcdPrefix, o.callTimeout, tlsConfig)
		if err != nil {
			return invalidConfig(fmt.Errorf("--etcd-endpoints: %w", err))
		}
		defer e.Close()
		nonces = e
	case "none":
	default:
		return &usageError{err: fmt.Errorf("--nonce-store %q: want memory, etcd or none", o.nonceStore), showHelp: true}
	}
	r, err := sigresolver.New(o.keys, nonces, g.log)
	if err != nil {
		return invalidConfig(fmt.Errorf("--keys %s: %w", o.keys, err))
	}
	l, err := listenPrivate(ctx, o.socket)
	if err != nil {
		return err
	}
	timeout := o.callTimeout
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return h(ctx, req)
	}))
	resolverapi.Register(s, r)
	g.log.Info("signature resolver serving", "socket", o.socket, "nonceStore", o.nonceStore)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	select {
	case <-ctx.Done():
		s.GracefulStop()
		err := <-done // nil after GracefulStop
		_ = os.Remove(o.socket)
		return err
	case err := <-done:
		_ = os.Remove(o.socket)
		return err
	}
}

// listenPrivate listens on a unix socket at path, mode 0600, in a directory that must be
// this user's and private (privdir's rules), replacing a socket left by an earlier run.
func listenPrivate(ctx context.Context, path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := privdir.Ensure(dir); err != nil {
		return nil, invalidConfig(fmt.Errorf("--socket %s: %w", path, err))
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, invalidConfig(fmt.Errorf("--socket %s: something that is not a socket is there", path))
		}
		_ = os.Remove(path)
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("--socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("--socket: %w", err)
	}
	return l, nil
}

// etcdTLS is the TLS configuration of https etcd endpoints: etcd's CA (or the system's),
// and the client certificate, if given.
func (o *signatureResolverOptions) etcdTLS() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.etcdCA != "" {
		pem, err := os.ReadFile(o.etcdCA)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cafile: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-cafile %s: no PEM certificate in it", o.etcdCA)
		}
	}
	switch {
	case (o.etcdCert == "") != (o.etcdKey == ""):
		return nil, errors.New("--etcd-certfile and --etcd-keyfile go together")
	case o.etcdCert != "":
		cert, err := tls.LoadX509KeyPair(o.etcdCert, o.etcdKey)
		if err != nil {
			return nil, fmt.Errorf("--etcd-certfile/--etcd-keyfile: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
