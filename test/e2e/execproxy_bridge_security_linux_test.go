//go:build linux

package e2e

import (
	"bufio"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kplug/kplug/internal/testkit/localuser"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestSecurityExecProxyBridgeUnderIdleConnections runs the real kubectl through kplug
// run while another local user holds twice the bridge's tunnel limit of idle connections
// to its port (which, with its owner's uid, anyone reads in /proc/net/tcp), opened with
// bash's /dev/tcp: kubectl's requests still succeed.
// Issue 27 N5: connections that had not authenticated counted against the bridge's cap
// of 128, so such a user made every request of the owner fail with 503.
func TestSecurityExecProxyBridgeUnderIdleConnections(t *testing.T) {
	attacker := localuser.New(t)
	cp := framework.StartForTest(t, framework.Options{})
	dir := t.TempDir()
	kplug := buildKplug(t, dir)
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "run"))
	kubeconfig := proxyKubeconfig(t, cp, kplug, dir, map[string][]string{
		"admin": {"--client-cert", cp.Admin.Cert.CertFile, "--client-key", cp.Admin.Cert.KeyFile},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	// kplug run's command says where its kubeconfig is, then waits for the attacker.
	signal := filepath.Join(dir, "signal")
	script := `echo "$KUBECONFIG" > "$SIGNAL/kubeconfig"; while [ ! -e "$SIGNAL/go" ]; do sleep 0.1; done; exec "$KUBECTL" get --raw /version`
	if err := os.Mkdir(signal, 0o700); err != nil {
		t.Fatal(err)
	}
	victim := exec.CommandContext(ctx, kplug, "run", "--kubeconfig", kubeconfig, "--context", "admin", "--", "sh", "-c", script)
	victim.Env = append(os.Environ(), "SIGNAL="+signal, "KUBECTL="+filepath.Join(cp.BinDir, "kubectl"))
	var out, errOut strings.Builder
	victim.Stdout, victim.Stderr = &out, &errOut
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	var runErr error
	done := make(chan struct{})
	go func() {
		runErr = victim.Wait()
		close(done)
	}()
	defer func() {
		cancel()
		<-done
	}()
	var written []byte
	eventually(ctx, t, "kplug run's command to start", func() error {
		var err error
		written, err = os.ReadFile(filepath.Join(signal, "kubeconfig"))
		return err
	})
	kc, err := clientcmd.LoadFromFile(strings.TrimSpace(string(written)))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := url.Parse(kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster].ProxyURL)
	if err != nil {
		t.Fatal(err)
	}

	const n = 256
	hold := attacker.Command(ctx, "bash", "-c", `for i in $(seq "$N"); do exec {fd}<>"/dev/tcp/127.0.0.1/$PORT" || exit 1; done; echo held; read -r _`)
	hold.Env = append(hold.Env, "PORT="+proxy.Port(), "N="+strconv.Itoa(n))
	stdin, err := hold.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := hold.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		_ = hold.Wait()
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("%v holding %d connections to the bridge at %s: %q, %v", attacker, n, proxy.Host, line, err)
	}

	writeBytes(t, filepath.Join(signal, "go"), nil)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("kplug run did not end")
	}
	if runErr != nil || !strings.Contains(out.String(), `"gitVersion"`) {
		t.Errorf("kubectl through kplug run while %v held %d idle connections to the bridge: %v\nstdout %s\nstderr %s", attacker, n, runErr, out.String(), errOut.String())
	}
	waitNoSockets(t, filepath.Join(dir, "run", "kplug"), 10*time.Second)
}
