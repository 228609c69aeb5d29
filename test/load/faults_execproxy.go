package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/test/e2e/traffic"
)

// get GETs path through rt and wants a 200.
func get(ctx context.Context, rt http.RoundTripper, base, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body) // all of it: the connection is then reused
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %.300s", path, resp.StatusCode, body)
	}
	return nil
}

// judgeExec fills r's errors and checks the rule of the exec proxy's faults: a failure
// may leave a request's outcome open (the proxy died under it, or its upstream did), but
// none may be a 404, nor a refusal (a 4xx, or a 5xx with Retry-After) the fault cannot
// explain; a quiet load sees no failure at all.
func judgeExec(r *FaultResult, samples map[string][]traffic.Sample, quiet bool) {
	r.Errors = map[string]int{}
	for load, ss := range samples {
		for _, s := range ss {
			r.Requests++
			r.MaxLatency = max(r.MaxLatency, s.Took)
			if s.Outcome == traffic.OK {
				continue
			}
			r.Errors[load+": "+s.Op.String()+" "+s.Kind]++
			switch {
			case quiet:
				r.Problems = append(r.Problems, fmt.Sprintf("%s: %s at %v failed (%s), but this fault must not touch it", load, s.Op, s.At.Round(time.Millisecond), s.Kind))
			case s.Code == http.StatusNotFound, s.Outcome == traffic.Refused:
				r.Problems = append(r.Problems, fmt.Sprintf("%s: %s at %v: %s", load, s.Op, s.At.Round(time.Millisecond), s.Kind))
			}
		}
	}
	r.Problems = dedupe(r.Problems)
}

// ExecProxyFaults injects the exec proxy's faults one after the other under the traffic
// of load, which goes through session: the proxy daemon killed mid-stream, another
// client SIGKILLed, the upstream's connections reset. Each one's outcome is checked; the
// traffic's own check afterwards covers the writes and the watches.
func (s *ExecProxySetup) ExecProxyFaults(ctx context.Context, tr *traffic.Traffic, session *execproxy.Session, load, namespace string, tm Timing, logf func(string, ...any)) []FaultResult {
	proxied, err := session.Config()
	if err != nil {
		return []FaultResult{{Name: "setup", Problems: []string{err.Error()}}}
	}
	served := func() error {
		rt, err := session.Transport() // a new client: a new connection to the proxy
		if err != nil {
			return err
		}
		return get(ctx, rt, proxied.Host, traffic.ConfigMaps.Collection(namespace))
	}
	finish := func(r *FaultResult, quiet bool) FaultResult {
		time.Sleep(tm.Settle)
		r.End = tr.Since()
		judgeExec(r, collect(tr, r.Start, r.End, load), quiet)
		logf("%s", r.Summary())
		return *r
	}
	var results []FaultResult

	// The daemon killed mid-stream: the bridge finds its socket refusing, runs the plugin
	// again (same lock, same identity), and the clients go on through the new daemon.
	r := &FaultResult{Name: "proxy daemon killed (SIGKILL) mid-stream", Start: tr.Since()}
	logf("fault %q", r.Name)
	old := s.Daemon()
	if old == 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("want one proxy daemon, found %v", s.Daemons()))
	} else {
		_ = syscall.Kill(old, syscall.SIGKILL)
		if r.Recovery, err = until(ctx, time.Minute, served); err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("not served again within a minute: %v", err))
		}
		switch now := s.Daemons(); {
		case slices.Contains(now, old):
			r.Problems = append(r.Problems, fmt.Sprintf("the killed daemon %d still runs", old))
		case len(now) != 1:
			r.Problems = append(r.Problems, fmt.Sprintf("want one new daemon, found %v", now))
		default:
			r.Notes = append(r.Notes, fmt.Sprintf("daemon %d replaced by %d", old, now[0]))
		}
	}
	results = append(results, finish(r, false))

	// Another client, `kplug run -- kubectl get -w`, SIGKILLed: its proxy exits and removes
	// its socket; this client's traffic does not notice.
	r = &FaultResult{Name: "another client (kplug run -- kubectl get -w) SIGKILLed", Start: tr.Since()}
	logf("fault %q", r.Name)
	if err := s.killClient(ctx, r, namespace); err != nil {
		r.Problems = append(r.Problems, err.Error())
	}
	results = append(results, finish(r, true))

	// The upstream's connections reset, and new ones refused, for tm.Hold.
	r = &FaultResult{Name: "the apiserver's connections reset (TCP RST) and refused", Start: tr.Since()}
	logf("fault %q", r.Name)
	n := s.Relay.Reset(tm.Hold)
	time.Sleep(tm.Hold)
	if r.Recovery, err = until(ctx, time.Minute, served); err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("not served again within a minute: %v", err))
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%d open connections reset at once, %d in all", n, s.Relay.Resets()))
	results = append(results, finish(r, false))
	return results
}

// killClient runs `kplug run -- kubectl get configmaps -w` until its watch works, finds
// its proxy, SIGKILLs the client (only it: kubectl is left orphaned, as after a crash)
// and checks that the proxy exits and removes its socket.
func (s *ExecProxySetup) killClient(ctx context.Context, r *FaultResult, namespace string) error {
	before, sockets := s.Daemons(), s.Sockets()
	cmd := exec.CommandContext(ctx, s.Kplug, "run", "--kubeconfig", s.Kubeconfig, "--",
		filepath.Join(s.CP.BinDir, "kubectl"), "get", "configmaps", "-n", namespace, "--watch-only", "-o", "name")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the orphans
		_ = cmd.Wait()
	}()
	// The watch shows the traffic's changes once it runs through the proxy.
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case <-lines:
	case <-time.After(time.Minute):
		return fmt.Errorf("kplug run -- kubectl get -w showed nothing in a minute: %s", stderr.String())
	}
	var daemon int
	var socket string
	for _, d := range s.Daemons() {
		if !slices.Contains(before, d) {
			daemon = d
		}
	}
	for _, sk := range s.Sockets() {
		if !slices.Contains(sockets, sk) {
			socket = sk
		}
	}
	if daemon == 0 || socket == "" {
		return fmt.Errorf("the client's proxy not found (daemons %v, before %v; sockets %v)", s.Daemons(), before, s.Sockets())
	}
	_ = cmd.Process.Kill() // the client alone: SIGKILL, no clean-up of its own
	exited, err := until(ctx, 30*time.Second, func() error {
		if slices.Contains(s.Daemons(), daemon) {
			return fmt.Errorf("its proxy %d still runs", daemon)
		}
		if _, err := os.Lstat(socket); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("its socket %s is still there", socket)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("after the client was killed: %w", err)
	}
	r.Notes = append(r.Notes, fmt.Sprintf("its proxy exited and removed its socket %v after the kill", exited.Round(10*time.Millisecond)))
	return nil
}

// SocketDirRemoved removes the runtime directory (locks, sockets, the proxy's identity)
// under a client, and checks what the exec proxy specification promises: the client's
// established connections keep working; a new one fails at once with an error naming the
// cause (the proxy cannot be started again without its lock file); nothing new is left
// running, and the orphaned proxy exits with its client; the next client starts afresh.
func (s *ExecProxySetup) SocketDirRemoved(ctx context.Context, connect func() *execproxy.Session, namespace string) FaultResult {
	r := FaultResult{Name: "the runtime (socket) directory removed under a client"}
	before := s.Daemons()
	session := connect()
	proxied, err := session.Config()
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
		return r
	}
	var daemon int
	for _, d := range s.Daemons() {
		if !slices.Contains(before, d) {
			daemon = d
		}
	}
	path := traffic.ConfigMaps.Collection(namespace)
	established, _ := session.Transport()
	if err := get(ctx, established, proxied.Host, path); err != nil {
		r.Problems = append(r.Problems, "before: "+err.Error())
		return r
	}
	if err := os.RemoveAll(s.RuntimeDir); err != nil {
		r.Problems = append(r.Problems, err.Error())
		return r
	}
	if err := get(ctx, established, proxied.Host, path); err != nil {
		r.Problems = append(r.Problems, "an established connection failed after the directory went: "+err.Error())
	} else {
		r.Notes = append(r.Notes, "established connections keep working")
	}
	fresh, _ := session.Transport()
	start := time.Now()
	err = get(ctx, fresh, proxied.Host, path)
	took := time.Since(start)
	switch {
	case err == nil:
		r.Notes = append(r.Notes, fmt.Sprintf("a new connection was served (in %v)", took.Round(time.Millisecond)))
	case !strings.Contains(err.Error(), "could not be started again"):
		r.Problems = append(r.Problems, fmt.Sprintf("a new connection failed without saying why: %v", err))
	default:
		r.Notes = append(r.Notes, fmt.Sprintf("a new connection failed in %v: %v", took.Round(time.Millisecond), err))
	}
	if now := s.Daemons(); len(now) != len(before)+1 {
		r.Problems = append(r.Problems, fmt.Sprintf("daemons %v after the removal, want the client's %d beside %v", now, daemon, before))
	}
	session.Close()
	exited, err := until(ctx, 30*time.Second, func() error {
		if slices.Contains(s.Daemons(), daemon) {
			return fmt.Errorf("the orphaned proxy %d still runs after its client closed", daemon)
		}
		return nil
	})
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
	} else {
		r.Notes = append(r.Notes, fmt.Sprintf("the orphaned proxy exited %v after its client closed", exited.Round(10*time.Millisecond)))
	}
	next := connect()
	defer next.Close()
	rt, _ := next.Transport()
	if err := get(ctx, rt, proxied.Host, path); err != nil {
		r.Problems = append(r.Problems, "the next client: "+err.Error())
	} else {
		r.Notes = append(r.Notes, "the next client recreated the directory and was served")
	}
	return r
}
