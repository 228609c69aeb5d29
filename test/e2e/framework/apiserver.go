package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kplug/kplug/internal/version"
)

// ServerOptions makes one apiserver differ from the others.
type ServerOptions struct {
	// Name is the server's name and, in its own UTS namespace, its hostname, which decides
	// its identity Lease. Default: apiserver-<index>.
	Name string
	// Flags are extra kube-apiserver flags, added last so they override the defaults,
	// e.g. "--runtime-config=batch/v1=false".
	Flags []string
	// FeatureGates become --feature-gates. With UnknownVersionInteroperabilityProxy on, the
	// peer flags of the mixed version proxy are added too.
	FeatureGates map[string]bool
	// Version is the kube-apiserver release to run: empty for the pinned one
	// (version.Kubernetes, kube-apiserver), or version.KubernetesPrevious, which `make tools`
	// builds as kube-apiserver-<version>.
	Version string
}

// binary is the file name of the kube-apiserver release o asks for.
func (o ServerOptions) binary() string {
	if o.Version == "" || o.Version == version.Kubernetes {
		return "kube-apiserver"
	}
	return "kube-apiserver-" + o.Version
}

// mixedVersionProxyGate is the feature gate of upstream's mixed version proxy (KEP-4020).
const mixedVersionProxyGate = "UnknownVersionInteroperabilityProxy"

// APIServer is one running kube-apiserver.
type APIServer struct {
	Name    string
	Port    int
	URL     string // https://127.0.0.1:<port>
	proc    *process
	opts    ServerOptions
	isolate bool
}

// Stop shuts the server down (SIGTERM, then SIGKILL after a grace period) and waits for it.
func (s *APIServer) Stop() { s.proc.stop(15 * time.Second) }

// Running reports whether the server process is still alive.
func (s *APIServer) Running() bool { return s.proc.running() }

// LogPath is the file holding the server's stdout and stderr.
func (s *APIServer) LogPath() string { return s.proc.logPath }

func (cp *ControlPlane) startAPIServer(ctx context.Context, o ServerOptions, isolate bool) (*APIServer, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	s := &APIServer{Name: o.Name, Port: ports[0], URL: fmt.Sprintf("https://127.0.0.1:%d", ports[0]), opts: o, isolate: isolate}
	return s, cp.runAPIServer(ctx, s)
}

// Restart starts the stopped server i again, with the same name, port and flags, and
// waits until it is ready.
func (cp *ControlPlane) Restart(ctx context.Context, i int) error {
	return cp.Replace(ctx, i, cp.Servers[i].opts)
}

// Replace starts the stopped server i again with other options (another Version, for a
// rolling upgrade), keeping its name, port and certificates, and waits until it is ready.
func (cp *ControlPlane) Replace(ctx context.Context, i int, o ServerOptions) error {
	s := cp.Servers[i]
	if s.Running() {
		return fmt.Errorf("%s is still running", s.Name)
	}
	o.Name = s.Name
	s.opts = o
	return cp.runAPIServer(ctx, s)
}

// Version is the kube-apiserver release the server runs (or ran last).
func (s *APIServer) Version() string {
	if s.opts.Version == "" {
		return version.Kubernetes
	}
	return s.opts.Version
}

func (cp *ControlPlane) runAPIServer(ctx context.Context, s *APIServer) error {
	o, isolate := s.opts, s.isolate
	var err error
	bin := filepath.Join(cp.BinDir, o.binary())
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s (kube-apiserver %s) is missing: run `make tools`: %w", bin, o.Version, err)
	}
	argv := append([]string{bin}, cp.apiserverFlags(s, o)...)
	if isolate {
		// Each apiserver names its identity Lease after its hostname: give each one its own.
		argv = append([]string{"unshare", "--uts", "sh", "-c", `hostname "$0" && exec "$@"`, s.Name}, argv...)
	}
	s.proc, err = startProcess(s.Name, filepath.Join(cp.Dir, s.Name+".log"), argv)
	if err != nil {
		return err
	}
	client, err := cp.adminHTTPClient()
	if err != nil {
		s.Stop()
		return err
	}
	defer client.CloseIdleConnections()
	ready := func(ctx context.Context) error { return checkReadyz(ctx, client, s.URL) }
	if err := waitReady(ctx, s.proc, 90*time.Second, ready); err != nil {
		s.Stop()
		return err
	}
	return nil
}

func (cp *ControlPlane) apiserverFlags(s *APIServer, o ServerOptions) []string {
	p := cp.PKI
	flags := []string{
		"--etcd-servers=" + cp.etcd.clientURL,
		"--bind-address=127.0.0.1",
		// Without this the server advertises a network interface, and peers and the
		// kubernetes Service would send traffic off the machine.
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", s.Port),
		"--cert-dir=" + filepath.Join(cp.Dir, s.Name+"-certs"),
		"--tls-cert-file=" + p.Serving.CertFile,
		"--tls-private-key-file=" + p.Serving.KeyFile,
		"--client-ca-file=" + p.ClientCA.File,
		"--token-auth-file=" + cp.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.ServiceAccKey,
		"--service-account-signing-key-file=" + p.ServiceAccKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--requestheader-client-ca-file=" + p.FrontProxyCA.File,
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.ProxyClient.CertFile,
		"--proxy-client-key-file=" + p.ProxyClient.KeyFile,
		// exec, attach, port-forward and logs go on to the pod's kubelet, as a client of
		// ClientCA, to the node's InternalIP, checking the kubelet's serving certificate
		// (StartNode issues it from ClusterCA for that address). A node's Hostname address
		// is its name, which nothing resolves here.
		"--kubelet-client-certificate=" + p.KubeletClient.CertFile,
		"--kubelet-client-key=" + p.KubeletClient.KeyFile,
		"--kubelet-certificate-authority=" + p.ClusterCA.File,
		"--kubelet-preferred-address-types=InternalIP",
		// Stop at once on SIGTERM; the framework stops apiservers before etcd.
		"--shutdown-delay-duration=0s",
		"--profiling=false",
	}
	if len(o.FeatureGates) > 0 {
		var gates []string
		for _, name := range slices.Sorted(maps.Keys(o.FeatureGates)) {
			gates = append(gates, fmt.Sprintf("%s=%t", name, o.FeatureGates[name]))
		}
		flags = append(flags, "--feature-gates="+strings.Join(gates, ","))
	}
	if o.FeatureGates[mixedVersionProxyGate] {
		flags = append(flags,
			"--peer-ca-file="+p.ClusterCA.File,
			"--peer-advertise-ip=127.0.0.1",
			fmt.Sprintf("--peer-advertise-port=%d", s.Port))
	}
	return append(flags, o.Flags...)
}

// canIsolate reports whether apiservers can get UTS namespaces of their own (root and unshare).
func canIsolate() error {
	if os.Geteuid() != 0 {
		return errors.New("not running as root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return fmt.Errorf("unshare (util-linux) not found: %w", err)
	}
	return nil
}

func (cp *ControlPlane) adminHTTPClient() (*http.Client, error) {
	cert, err := tls.X509KeyPair(cp.Admin.Cert.CertPEM, cp.Admin.Cert.KeyPEM)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(cp.PKI.ClusterCA.Cert)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      roots,
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
	}}}, nil
}

func checkReadyz(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// Kill kills the server with SIGKILL, as a crash would, and waits for it; Restart
// starts it again.
func (s *APIServer) Kill() { s.proc.kill() }

// Pause stops the server with SIGSTOP: connections to its port are still accepted by the
// kernel, but nothing is answered, as from a hung server. Resume continues it; a test that
// pauses a server must resume it (a paused server takes the whole grace period to stop).
func (s *APIServer) Pause() error { return s.proc.pause() }

// Resume continues a paused server (SIGCONT).
func (s *APIServer) Resume() error { return s.proc.resume() }

// PID is the server's process ID.
func (s *APIServer) PID() int { return s.proc.cmd.Process.Pid }
