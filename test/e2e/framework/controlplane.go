package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Options describe a control plane to start.
type Options struct {
	// Servers lists the apiservers, which all share one etcd. Empty means one server.
	Servers []ServerOptions
	// Dir holds PKI, kubeconfigs, data and logs. Empty means a new temporary directory,
	// removed by Stop.
	Dir string
	// BinDir holds etcd, kube-apiserver and kubectl. Empty means FindBinDir().
	BinDir string
	// Logf, if set, receives progress messages.
	Logf func(format string, args ...any)
	// OneCA makes the cluster CA sign client certificates too (PKI.ClientCA is
	// PKI.ClusterCA), as kubeadm's ca.crt does: for a cluster laid out as kubeadm's.
	OneCA bool
}

// ControlPlane is etcd plus one or more kube-apiservers on loopback, with generated PKI and
// three users: Admin (client certificate, system:masters), CertUser (client certificate)
// and TokenUser (static token).
type ControlPlane struct {
	Dir     string
	BinDir  string
	PKI     *PKI
	EtcdURL string
	Servers []*APIServer

	Admin     *User
	CertUser  *User
	TokenUser *User

	etcd               *etcd
	mu                 sync.Mutex // guards processes and sidecars
	processes          []*Process
	sidecars           *Sidecars
	controllerManagers []*ControllerManager
	nodes              []*Node
	tokenFile          string
	ownsDir            bool
	logf               func(string, ...any)
}

// Start brings up etcd and the apiservers and waits until every apiserver is ready. On
// error, whatever started is stopped again.
func Start(ctx context.Context, o Options) (*ControlPlane, error) {
	cp := &ControlPlane{Dir: o.Dir, BinDir: o.BinDir, logf: o.Logf}
	if cp.logf == nil {
		cp.logf = func(string, ...any) {}
	}
	if err := cp.start(ctx, o.Servers, o.OneCA); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context, servers []ServerOptions, oneCA bool) error {
	var err error
	if cp.BinDir == "" {
		if cp.BinDir, err = FindBinDir(); err != nil {
			return err
		}
	}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "kplug-e2e-"); err != nil {
			return err
		}
		cp.ownsDir = true
	}
	if len(servers) == 0 {
		servers = []ServerOptions{{}}
	}
	isolateErr := canIsolate()
	if isolateErr != nil && len(servers) > 1 {
		return fmt.Errorf("starting %d apiservers needs a UTS namespace for each (their identity Leases are named after the hostname), which needs root and unshare: %w", len(servers), isolateErr)
	}

	start := time.Now()
	if cp.PKI, err = newPKI(filepath.Join(cp.Dir, "pki"), oneCA); err != nil {
		return fmt.Errorf("generating PKI: %w", err)
	}
	if err := cp.createUsers(); err != nil {
		return err
	}
	if cp.etcd, err = startEtcd(ctx, cp.BinDir, cp.Dir); err != nil {
		return err
	}
	cp.EtcdURL = cp.etcd.clientURL
	cp.logf("etcd ready at %s (%v)", cp.EtcdURL, time.Since(start).Round(time.Millisecond))

	for i, so := range servers {
		if so.Name == "" {
			so.Name = fmt.Sprintf("apiserver-%d", i)
		}
		s, err := cp.startAPIServer(ctx, so, isolateErr == nil)
		if err != nil {
			return err
		}
		cp.Servers = append(cp.Servers, s)
		cp.logf("%s ready at %s (%v)", s.Name, s.URL, time.Since(start).Round(time.Millisecond))
	}
	return cp.writeKubeconfigs()
}

// Stop stops the apiservers, then etcd (an apiserver whose etcd is gone can hang on
// shutdown), and removes the directory if Start created it. It is safe to call twice.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	processes, nodes := cp.processes, cp.nodes
	cp.mu.Unlock()
	for _, n := range nodes {
		n.Stop()
	}
	for _, p := range processes {
		p.Stop(10 * time.Second)
	}
	for _, m := range cp.controllerManagers {
		m.Stop()
	}
	for _, s := range cp.Servers {
		s.Stop()
	}
	if cp.etcd != nil {
		cp.etcd.proc.stop(10 * time.Second)
	}
	if cp.ownsDir {
		_ = os.RemoveAll(cp.Dir)
	}
}

// Kubectl returns a command running the pinned kubectl as user against the first server.
func (cp *ControlPlane) Kubectl(ctx context.Context, u *User, args ...string) *exec.Cmd {
	args = append([]string{"--kubeconfig=" + u.Kubeconfig}, args...)
	return exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), args...)
}

// Logs returns the last lines of every process log, for a failing test to print.
func (cp *ControlPlane) Logs(lines int) string {
	var b strings.Builder
	procs := []*process{}
	if cp.etcd != nil {
		procs = append(procs, cp.etcd.proc)
	}
	for _, s := range cp.Servers {
		procs = append(procs, s.proc)
	}
	for _, m := range cp.controllerManagers {
		procs = append(procs, m.proc)
	}
	cp.mu.Lock()
	for _, p := range cp.processes {
		procs = append(procs, p.proc)
	}
	cp.mu.Unlock()
	for _, p := range procs {
		fmt.Fprintf(&b, "===== last %d lines of %s =====\n%s\n", lines, p.logPath, p.tail(lines))
	}
	return b.String()
}
