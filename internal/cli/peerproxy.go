package cli

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/sidecar"
)

type peerproxyOptions struct {
	kubeconfig, apiserver                 string
	listen, advertise, id, namespace      string
	tlsCert, tlsKey                       string
	clientCA, requestHeaderCA             string
	allowedNames                          []string
	proxyCert, proxyKey                   string
	peerCA, peerServerName                string
	peerCert, peerKey                     string
	leaseDuration, localRefresh           time.Duration
	peerRefresh, peerTimeout, shutdownMax time.Duration
	metricsAddr                           string
}

func (o *peerproxyOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig with the sidecar's own credentials (Leases in --lease-namespace, discovery); its server is the local apiserver unless --apiserver is set (required)")
	f.StringVar(&o.apiserver, "apiserver", "", "URL of the local kube-apiserver (default: the kubeconfig's server)")
	f.StringVar(&o.listen, "listen-address", ":6444", "host:port to serve clients and peers on (TLS)")
	f.StringVar(&o.advertise, "advertise-address", "", "host:port where peers reach this sidecar (default: --listen-address when it names a host)")
	f.StringVar(&o.id, "id", "", "name of this sidecar's identity Lease, unique in the cluster (default: derived from the hostname)")
	f.StringVar(&o.namespace, "lease-namespace", sidecar.DefaultNamespace, "namespace of the identity Leases, where the sidecar's user may get, list, watch, create, update and delete Leases (docs/peerproxy-rbac.yaml)")
	f.StringVar(&o.tlsCert, "tls-cert-file", "", "serving certificate for clients, PEM; also presented to peers unless --peer-tls-cert-file is set (required)")
	f.StringVar(&o.tlsKey, "tls-private-key-file", "", "serving key, PEM (required)")
	f.StringVar(&o.clientCA, "client-ca-file", "", "CA that signs users' client certificates (as kube-apiserver's --client-ca-file)")
	f.StringVar(&o.requestHeaderCA, "requestheader-client-ca-file", "", "CA that signs the proxy client certificates of peers (as kube-apiserver's flag of that name) (required)")
	f.StringSliceVar(&o.allowedNames, "requestheader-allowed-names", nil, "common names accepted from --requestheader-client-ca-file; empty accepts any")
	f.StringVar(&o.proxyCert, "proxy-client-cert-file", "", "front-proxy client certificate presented to the local apiserver and to peers (required)")
	f.StringVar(&o.proxyKey, "proxy-client-key-file", "", "key of --proxy-client-cert-file (required)")
	f.StringVar(&o.peerCA, "peer-ca-file", "", "CA that peers' serving certificates must verify against; best a CA that signs only peer certificates (required)")
	f.StringVar(&o.peerServerName, "peer-server-name", mvproxy.DefaultPeerServerName, "name peers' serving certificates must hold, whatever address their Lease names")
	f.StringVar(&o.peerCert, "peer-tls-cert-file", "", "serving certificate presented to peers (who ask for --peer-server-name), PEM; signed by the --peer-ca-file CA")
	f.StringVar(&o.peerKey, "peer-tls-private-key-file", "", "key of --peer-tls-cert-file")
	f.DurationVar(&o.leaseDuration, "lease-duration", 30*time.Second, "duration of the identity Lease, renewed every third of it")
	f.DurationVar(&o.localRefresh, "local-refresh", 10*time.Second, "period of refreshing the local apiserver's discovery")
	f.DurationVar(&o.peerRefresh, "peer-refresh", time.Minute, "period of refreshing every peer's discovery")
	f.DurationVar(&o.peerTimeout, "peer-timeout", 5*time.Second, "timeout of one peer discovery fetch")
	f.DurationVar(&o.shutdownMax, "shutdown-timeout", 10*time.Second, "how long to let requests finish on shutdown")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "host:port to serve Prometheus metrics on at /metrics; empty disables")
}

func newPeerproxyCommand(g *globals) *cobra.Command {
	o := &peerproxyOptions{}
	cmd := &cobra.Command{
		Use:   "peerproxy",
		Short: "Mixed version proxy sidecar beside a kube-apiserver (KEP-4020)",
		Long: `peerproxy serves clients in place of the local kube-apiserver. It forwards a request to
the local apiserver when that serves the requested group/version/resource, and otherwise to
a peer sidecar whose apiserver does; it serves the peer-aggregated /apis document. Peers
find each other through identity Leases in --lease-namespace. The secure setup (a peer
CA of its own, a user and namespace of its own) is in docs/mixed-version-proxy.md; a
static pod for kubeadm control-plane nodes is in deploy/peerproxy.`,
		Example: `  kplug peerproxy --kubeconfig=/etc/kubernetes/kplug-peerproxy.conf \
    --apiserver=https://10.0.0.11:6443 --listen-address=10.0.0.11:6444 \
    --tls-cert-file=/etc/kubernetes/pki/apiserver.crt --tls-private-key-file=/etc/kubernetes/pki/apiserver.key \
    --client-ca-file=/etc/kubernetes/pki/ca.crt \
    --requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt --requestheader-allowed-names=front-proxy-client \
    --proxy-client-cert-file=/etc/kubernetes/pki/front-proxy-client.crt --proxy-client-key-file=/etc/kubernetes/pki/front-proxy-client.key \
    --peer-ca-file=/etc/kubernetes/pki/kplug/peer-ca.crt \
    --peer-tls-cert-file=/etc/kubernetes/pki/kplug/peerproxy-peer.crt --peer-tls-private-key-file=/etc/kubernetes/pki/kplug/peerproxy-peer.key \
    --metrics-addr=127.0.0.1:9444`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), g) },
	}
	o.AddFlags(cmd)
	return cmd
}

func (o *peerproxyOptions) run(ctx context.Context, g *globals) error {
	reg := prometheus.NewRegistry()
	metrics, err := mvproxy.NewMetrics(reg)
	if err != nil {
		return err
	}
	opts, err := o.sidecarOptions(g.log)
	if err != nil {
		return err
	}
	opts.Metrics = metrics
	s, err := sidecar.New(opts)
	if err != nil {
		return invalidConfig(sidecarFlagErrors(err))
	}
	err = serveWithMetrics(ctx, g, o.metricsAddr, reg, s.Serve)
	if lae := (*sidecar.LeaseAccessError)(nil); errors.As(err, &lae) {
		return fmt.Errorf("peerproxy: --lease-namespace=%s: %w", o.namespace, err)
	}
	return err
}

// sidecarOptions reads and checks every file and flag; its errors are configuration
// errors.
func (o *peerproxyOptions) sidecarOptions(log *slog.Logger) (sidecar.Options, error) {
	var errs []error
	need := func(v, flag string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("--%s is required", flag))
		}
	}
	need(o.kubeconfig, "kubeconfig")
	need(o.tlsCert, "tls-cert-file")
	need(o.tlsKey, "tls-private-key-file")
	need(o.requestHeaderCA, "requestheader-client-ca-file")
	need(o.proxyCert, "proxy-client-cert-file")
	need(o.proxyKey, "proxy-client-key-file")
	need(o.peerCA, "peer-ca-file")
	if len(errs) > 0 {
		return sidecar.Options{}, invalidConfig(errors.Join(errs...))
	}
	if (o.peerCert == "") != (o.peerKey == "") {
		errs = append(errs, errors.New("--peer-tls-cert-file and --peer-tls-private-key-file go together"))
	}
	serving, err := sidecar.CertificateFiles(o.tlsCert, o.tlsKey, log)
	if err != nil {
		errs = append(errs, fmt.Errorf("--tls-cert-file/--tls-private-key-file: %w", err))
	}
	var peerServing func() (*tls.Certificate, error)
	if o.peerCert != "" && o.peerKey != "" {
		if peerServing, err = sidecar.CertificateFiles(o.peerCert, o.peerKey, log); err != nil {
			errs = append(errs, fmt.Errorf("--peer-tls-cert-file/--peer-tls-private-key-file: %w", err))
		}
	}
	proxyCert, err := sidecar.CertificateFiles(o.proxyCert, o.proxyKey, log)
	if err != nil {
		errs = append(errs, fmt.Errorf("--proxy-client-cert-file/--proxy-client-key-file: %w", err))
	}
	peerCAs, err := loadPool(o.peerCA, "peer-ca-file")
	errs = append(errs, err)
	rhCAs, err := loadPool(o.requestHeaderCA, "requestheader-client-ca-file")
	errs = append(errs, err)
	var clientCAs *x509.CertPool
	if o.clientCA != "" {
		clientCAs, err = loadPool(o.clientCA, "client-ca-file")
		errs = append(errs, err)
	}
	var restCfg *rest.Config
	if o.kubeconfig != "" {
		kf := newKubeconfigFiles(o.kubeconfig, "", o.apiserver)
		kf.noContextFlag = true
		if restCfg, err = kf.restConfig(); err != nil {
			errs = append(errs, fmt.Errorf("loading kubeconfig: %w", err))
		}
	}
	if host, _, err := net.SplitHostPort(o.listen); o.advertise == "" && (err != nil || host == "" || net.ParseIP(host).IsUnspecified()) {
		errs = append(errs, fmt.Errorf("--advertise-address is required when --listen-address %q names no host", o.listen))
	}
	if err := errors.Join(errs...); err != nil {
		return sidecar.Options{}, invalidConfig(err)
	}
	restCfg.QPS, restCfg.Burst = 20, 40
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return sidecar.Options{}, invalidConfig(fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err))
	}
	localClient, err := rest.HTTPClientFor(restCfg)
	if err != nil {
		return sidecar.Options{}, invalidConfig(fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err))
	}
	localTLS, err := rest.TLSConfigFor(restCfg)
	if err != nil {
		return sidecar.Options{}, invalidConfig(fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err))
	}
	var localRoots *x509.CertPool
	if localTLS != nil {
		localRoots = localTLS.RootCAs
	}
	id := o.id
	if id == "" {
		if id, err = defaultPeerID(); err != nil {
			return sidecar.Options{}, err
		}
	}
	return sidecar.Options{
		ID: id, ListenAddress: o.listen, Address: o.advertise, Namespace: o.namespace,
		GetServingCertificate: serving, GetPeerCertificate: peerServing,
		LocalURL: strings.TrimSuffix(restCfg.Host, "/"), LocalRootCAs: localRoots, LocalClient: localClient, Client: client,
		GetProxyClientCertificate: proxyCert, PeerRootCAs: peerCAs, PeerServerName: o.peerServerName,
		Identifier:    &mvproxy.CertIdentifier{ClientCAs: clientCAs, RequestHeaderCAs: rhCAs, AllowedNames: o.allowedNames},
		LeaseDuration: o.leaseDuration, LocalRefresh: o.localRefresh, PeerRefresh: o.peerRefresh, PeerTimeout: o.peerTimeout,
		ShutdownTimeout: o.shutdownMax,
		Logger:          log,
	}, nil
}

// sidecarFlagErrors names the flags behind what sidecar.New refused: the certificate presented
// to peers (--tls-cert-file, or --peer-tls-cert-file), and one CA for users and front
// proxies. Other errors keep the library's words.
func sidecarFlagErrors(err error) error {
	var out []error
	for _, e := range joined(err) {
		var pce *sidecar.PeerCertificateError
		switch {
		case errors.As(e, &pce):
			flag := "--tls-cert-file"
			if pce.Peer {
				flag = "--peer-tls-cert-file"
			}
			out = append(out, fmt.Errorf("%s: peers would refuse this sidecar: the certificate does not verify with --peer-ca-file for --peer-server-name %q (%w); issue one from the peer CA for that name", flag, pce.ServerName, pce.Err))
		case errors.Is(e, mvproxy.ErrSharedClientCA):
			out = append(out, errors.New("--client-ca-file and --requestheader-client-ca-file are the same CA and --requestheader-allowed-names is empty: every user's client certificate would be trusted to assert any identity; use a separate front-proxy CA or set --requestheader-allowed-names"))
		default:
			out = append(out, fmt.Errorf("sidecar: options: %w", e))
		}
	}
	return errors.Join(out...)
}

// joined returns the errors err joins (errors.Join, under any %w wrapping), or err alone.
func joined(err error) []error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			return j.Unwrap()
		}
	}
	return []error{err}
}

func loadPool(path, flag string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path) //nolint:gosec // the operator names the file with a flag
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--%s %s: no PEM certificate in it", flag, path)
	}
	return pool, nil
}

// defaultPeerID derives a stable Lease name from the hostname, as kube-apiserver does
// for its own identity.
func defaultPeerID() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("peerproxy: no --id and no hostname: %w", err)
	}
	sum := sha256.Sum256([]byte(host))
	return "kplug-peerproxy-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:10])), nil
}
