package load

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/test/e2e/framework"
	"github.com/kplug/kplug/test/e2e/traffic"
)

// ExecProxySetup is the exec proxy's setup under load: one kube-apiserver behind a Relay,
// and a kubeconfig whose user runs a proxy plugin (`kplug proxy-plugin`) with the admin's client
// certificate; the harness is the client (execproxy.Connect), as a Go program using the
// library is, and `kplug run` runs other clients.
type ExecProxySetup struct {
	CP         *framework.ControlPlane
	Relay      *Relay
	Kplug      string // kplug run, a client that runs others
	Plugin     Plugin
	Kubeconfig string
	RuntimeDir string // $XDG_RUNTIME_DIR/kplug: locks, sockets, logs
	PprofDir   string
	Admin      *tls.Config
}

// Plugin is the exec proxy plugin under load: the exec block's command and its arguments
// before the client certificate's flags, and the command line of the daemon it starts.
type Plugin struct {
	Command string
	Args    []string
	Daemon  []string
}

// KplugPlugin is `kplug proxy-plugin` of BuildKplug: its daemon is kplug-proxy-plugin.
func KplugPlugin(kplug string) Plugin {
	return Plugin{Command: kplug, Args: []string{"proxy-plugin"}, Daemon: []string{kplug + "-proxy-plugin", "--daemon"}}
}

// SDKPlugin builds cmd/sdk-proxy-plugin, a plugin written with execproxy/server.Main.
func SDKPlugin(t testing.TB) Plugin {
	t.Helper()
	sdk := buildProgram(t, "./cmd/sdk-proxy-plugin", filepath.Join(t.TempDir(), "sdk-proxy-plugin"))
	return Plugin{Command: sdk, Daemon: []string{sdk, "--exec-proxy-daemon"}}
}

// StartExecProxy starts the apiserver and the relay, and writes the kubeconfig; it sets
// XDG_RUNTIME_DIR and KPLUG_LOAD_PPROF_DIR for the plugin and its daemon (t.Setenv).
func StartExecProxy(t *testing.T, kplug string, plugin Plugin) *ExecProxySetup {
	t.Helper()
	cp := framework.StartForTest(t, framework.Options{})
	s := &ExecProxySetup{CP: cp, Kplug: kplug, Plugin: plugin, PprofDir: t.TempDir()}
	var err error
	if s.Admin, err = cp.ClientTLS(cp.Admin); err != nil {
		t.Fatal(err)
	}
	if s.Relay, err = NewRelay(strings.TrimPrefix(cp.Servers[0].URL, "https://")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Relay.Close)
	// A short directory: a socket path has at most about 100 bytes.
	run, err := os.MkdirTemp("", "kplug-load-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(run) })
	t.Setenv("XDG_RUNTIME_DIR", run)
	t.Setenv("KPLUG_LOAD_PPROF_DIR", s.PprofDir)
	s.RuntimeDir = execproxy.RuntimeDir(run)

	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server, cluster.CertificateAuthorityData = "https://"+s.Relay.Addr, cp.PKI.ClusterCA.CertPEM
	user := clientcmdapi.NewAuthInfo()
	user.Exec = &clientcmdapi.ExecConfig{
		APIVersion: execcred.V1, Command: plugin.Command,
		Args:               append(slices.Clone(plugin.Args), "--client-cert", cp.Admin.Cert.CertFile, "--client-key", cp.Admin.Cert.KeyFile),
		ProvideClusterInfo: true, InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}
	c := clientcmdapi.NewContext()
	c.Cluster, c.AuthInfo = "relayed", "proxied"
	cfg.Clusters["relayed"], cfg.AuthInfos["proxied"], cfg.Contexts["proxied"] = cluster, user, c
	cfg.CurrentContext = "proxied"
	s.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, s.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	return s
}

// Connect is a client's session through the exec proxy, closed when the test ends.
func (s *ExecProxySetup) Connect(ctx context.Context, t testing.TB) *execproxy.Session {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	session, err := execproxy.Connect(ctx, cfg, execproxy.Options{RuntimeDir: s.RuntimeDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(session.Close)
	if !session.Proxied() {
		t.Fatal("the plugin answered without a proxy")
	}
	return session
}

// Target is the traffic target through session: each client a transport of its own
// (Session.Transport), WebSocket watches through the session's bridge, as client-go's
// WebSocket dialer goes.
func (s *ExecProxySetup) Target(name string, session *execproxy.Session) (traffic.Target, error) {
	proxied, err := session.Config()
	if err != nil {
		return traffic.Target{}, err
	}
	hop, err := rest.TLSConfigFor(proxied)
	if err != nil {
		return traffic.Target{}, err
	}
	hop.NextProtos = nil
	return traffic.Target{
		Name:         name,
		URL:          proxied.Host,
		NewTransport: session.Transport,
		NewDialer: func() (*websocket.Dialer, error) {
			return &websocket.Dialer{Proxy: http.ProxyURL(session.Bridge().ProxyURL()), TLSClientConfig: hop.Clone(), HandshakeTimeout: 30 * time.Second}, nil
		},
	}, nil
}

// Direct is the traffic target straight at the apiserver, as the admin.
func (s *ExecProxySetup) Direct(name string) traffic.Target {
	return traffic.HTTPSTarget(name, s.CP.Servers[0].URL, s.Admin)
}

// Daemons returns the PIDs of the running proxy daemons of this setup's plugin.
func (s *ExecProxySetup) Daemons() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if slices.Equal(args, s.Plugin.Daemon) && !zombie(pid) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || len(stat) < i+3 || stat[i+2] == 'Z'
}

// Sockets returns the proxy sockets in the runtime directory.
func (s *ExecProxySetup) Sockets() []string {
	m, _ := filepath.Glob(filepath.Join(s.RuntimeDir, "proxy-*.sock"))
	return m
}

// Daemon is the PID of the one running proxy daemon, or 0 when there is none or more than
// one (the load runs one client; a fault that starts another knows which is which).
func (s *ExecProxySetup) Daemon() int {
	if d := s.Daemons(); len(d) == 1 {
		return d[0]
	}
	return 0
}
