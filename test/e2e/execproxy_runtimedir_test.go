//go:build linux

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/testkit/localuser"
)

// Issue 12 finding 1: with XDG_RUNTIME_DIR unset, the exec proxy client used
// $TMPDIR/kplug-<uid> whoever owned it. Another local user who created it first could
// plant links named <lock>.log and <lock>.identity, through which the launcher and the
// proxy wrote (as root here: any file), or a FIFO named like an old lock file, on which
// every client hung. The victim (root) runs the real kplug binary: it must refuse
// clearly, write through no link, and not hang. No API server is involved: nothing gets
// that far.
func TestSecurityExecProxyRuntimeDirectoryOfAnotherUser(t *testing.T) {
	attacker := localuser.New(t)
	dir := t.TempDir()
	kplug := buildKplug(t, dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion: execcred.V1, Command: kplug, Args: []string{"proxy-plugin", "--header", "X-Test=1"},
		ProvideClusterInfo: true, InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	// Files of the victim's that the attacker's links point at, where the attacker cannot go.
	logTarget, idTarget := filepath.Join(dir, "victim-log"), filepath.Join(dir, "victim-identity")
	for _, f := range []string{logTarget, idTarget} {
		writeBytes(t, f, []byte("keep"))
	}
	// runtimeDir is the victim's $TMPDIR/kplug-<uid>, in a fresh sticky world-writable
	// directory standing for /tmp, which the attacker creates first.
	runtimeDir := func(t *testing.T) (tmp, dir string) {
		tmp, err := os.MkdirTemp("", "kplug-shared-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(tmp) })
		if err := os.Chmod(tmp, 0o1777); err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(tmp, "kplug-"+strconv.Itoa(os.Getuid()))
		attacker.Sh(t, "mkdir -m 777 "+dir)
		return tmp, dir
	}
	// request runs kplug request as the victim, with XDG_RUNTIME_DIR unset.
	request := func(t *testing.T, tmp string) (stderr string, err error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, kplug, "request", "--kubeconfig", kubeconfig, "/version")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(kv, "TMPDIR=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		err = cmd.Run()
		if ctx.Err() != nil {
			t.Fatalf("kplug request hung in %s's directory: %s", attacker, errOut.String())
		}
		return errOut.String(), err
	}
	refusal := func(dir string) string {
		return "exec proxy: runtime directory: " + dir + " belongs to uid " + strconv.Itoa(attacker.UID) + ", not to this user"
	}

	t.Run("links planted as the lock appears", func(t *testing.T) {
		tmp, dir := runtimeDir(t)
		// The attacker watches the directory and links <lock>.log and <lock>.identity to
		// the victim's files as soon as a lock file appears.
		ctx, stop := context.WithCancel(t.Context())
		planter := attacker.Command(ctx, "sh", "-c", `cd "$0" || exit 1
while :; do
  for f in client-*.lock; do
    [ -e "$f" ] || continue
    ln -s "$1" "$f.log" 2>/dev/null
    ln -s "$2" "$f.identity" 2>/dev/null
  done
done`, dir, logTarget, idTarget)
		if err := planter.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stop(); _ = planter.Wait() }()
		stderr, err := request(t, tmp)
		if exitCode(err) != 1 || !strings.Contains(stderr, refusal(dir)) {
			t.Errorf("kplug request: %v\n%s\nwant exit 1 and %q", err, stderr, refusal(dir))
		}
		for _, f := range []string{logTarget, idTarget} {
			if b, _ := os.ReadFile(f); string(b) != "keep" {
				t.Errorf("%s was written through the attacker's link: %.80q", f, b)
			}
		}
	})

	t.Run("a FIFO named like an old lock file", func(t *testing.T) {
		tmp, dir := runtimeDir(t)
		fifo := filepath.Join(dir, "client-0000000000000000.lock")
		attacker.Sh(t, "mkfifo "+fifo+" && touch -d 2000-01-01 "+fifo)
		stderr, err := request(t, tmp)
		if exitCode(err) != 1 || !strings.Contains(stderr, refusal(dir)) {
			t.Errorf("kplug request: %v\n%s\nwant exit 1 and %q", err, stderr, refusal(dir))
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("the victim wrote in the attacker's directory: %v", entries)
		}
	})
}
