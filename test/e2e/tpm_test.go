//go:build linux

package e2e

import (
	"context"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/internal/testkit/swtpm"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestTPMKeysReleaseBinary runs the release archive's kplug, built without cgo, with
// client keys held by a software TPM (swtpm, keys made with tpm2-tools as TSS2 key files)
// and certificates from the control plane's client CA: stock kubectl under `kplug run`
// (whoami, a watch, exec into a container on a real kubelet), a certificate renewed for the same key under a
// running proxy, a KEP-6308 signature made in the TPM and verified by kplug
// signature-proxy, and the errors a user meets (wrong auth value, no TPM, a busy TPM),
// each one message naming the key or the device.
func TestTPMKeysReleaseBinary(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	go releaseKplug() //nolint:errcheck // started early, beside the control plane; checked below
	// The Node authorizer (after RBAC: the flag adds to the default) and NodeRestriction
	// let the kubelet of "kubectl exec" in, as in a real cluster.
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{Flags: []string{
		"--authorization-mode=Node",
		"--enable-admission-plugins=NodeRestriction",
	}}}})
	kplug := releaseKplugForTest(t)
	dir := t.TempDir()
	runtimeDir := filepath.Join(dir, "run")
	t.Setenv("XDG_RUNTIME_DIR", runtimeDir)
	t.Setenv("KPLUG_TPM_DEVICE", tpm.Socket) // the kubeconfig names the key file only

	keyFile := func(tpm *swtpm.TPM, name, auth string) (string, crypto.PublicKey) {
		path, pub, err := tpm.KeyFile(name, "ecc256", auth)
		if err != nil {
			t.Fatal(err)
		}
		return path, pub
	}
	issue := func(name, user, group string, pub crypto.PublicKey) string {
		path, err := cp.PKI.ClientCA.IssueFor(name, &x509.Certificate{
			Subject:     pkix.Name{CommonName: user, Organization: []string{group}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, pub, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	aliceKey, alicePub := keyFile(tpm, "alice", "")
	rotating := filepath.Join(dir, "alice-rotating.crt")
	if err := os.Link(issue("alice-1", "tpm-alice", "tpm-users", alicePub), rotating); err != nil {
		t.Fatal(err)
	}
	kubeconfig := proxyKubeconfig(t, cp, kplug, dir, map[string][]string{
		"tpm":          {"--client-cert", issue("alice", "tpm-alice", "tpm-users", alicePub), "--client-key", aliceKey},
		"tpm-rotating": {"--client-cert", rotating, "--client-key", aliceKey},
	})
	// A TPM that another program holds: swtpm serves one connection at a time and queues
	// the others, so kplug's first command waits for its 30 s deadline. That runs beside
	// the other subtests.
	busyTPM := swtpm.NewTestTPM(t)
	busyKey, busyPub := keyFile(busyTPM, "dave", "")
	holder, err := (&net.Dialer{}).DialContext(t.Context(), "unix", busyTPM.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	busyKubeconfig := proxyKubeconfig(t, cp, kplug, t.TempDir(), map[string][]string{
		"busy": {"--client-cert", issue("dave", "tpm-dave", "tpm-users", busyPub), "--client-key", "tpm:file=" + busyKey + "?device=" + busyTPM.Socket},
	})
	kubectl := filepath.Join(cp.BinDir, "kubectl")
	var busy struct {
		out, errOut string
		err         error
	}
	busyDone := make(chan struct{})
	go func() {
		defer close(busyDone)
		busy.out, busy.errOut, busy.err = run(t, kplug, "run", "--kubeconfig", busyKubeconfig, "--context", "busy", "--", kubectl, "version")
	}()
	t.Cleanup(func() { <-busyDone }) // after the test's context has ended it

	admin := func(t *testing.T, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if out, err := cp.Kubectl(ctx, cp.Admin, args...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	kplugRun := func(context string, args ...string) (string, string, error) {
		return run(t, kplug, append([]string{"run", "--kubeconfig", kubeconfig, "--context", context, "--", kubectl}, args...)...)
	}
	whoami := []string{"auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups[0]}"}

	t.Run("kubectl auth whoami", func(t *testing.T) {
		if out, errOut, err := kplugRun("tpm", whoami...); err != nil || out != "tpm-alice tpm-users" {
			t.Errorf("whoami: %q, %v\n%s", out, err, errOut)
		}
	})

	t.Run("kubectl exec", func(t *testing.T) {
		// A real node (kubelet, containerd, runc): kubectl's exec stream, a WebSocket
		// through the proxy authenticated by the TPM key, reaches kube-apiserver, which
		// goes on to the pod's kubelet, and containerd runs the command in the container.
		// Skipped where no node can run (not root, binaries missing), unless required.
		node := framework.StartNodeForTest(t, cp, framework.NodeOptions{Name: "tpm-e2e-node"})
		admin(t, "create", "role", "tpm-exec", "-n", "default", "--verb=get,create", "--resource=pods,pods/exec")
		admin(t, "create", "rolebinding", "tpm-exec", "-n", "default", "--role=tpm-exec", "--group=tpm-users")
		// No scheduler, no CNI: the pod names its node and uses the host's network. Its
		// container runs the test image's program, which waits for SIGTERM.
		writeBytes(t, filepath.Join(dir, "pod.yaml"), []byte(`apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: default}
---
apiVersion: v1
kind: Pod
metadata: {name: tpm-exec, namespace: default}
spec:
  nodeName: `+node.Name+`
  hostNetwork: true
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 0
  containers: [{name: c, image: `+framework.PauseImage+`, imagePullPolicy: Never}]
`))
		admin(t, "create", "-f", filepath.Join(dir, "pod.yaml"))
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		if out, err := cp.Kubectl(ctx, cp.Admin, "wait", "pod/tpm-exec", "-n", "default", "--for=jsonpath={.status.phase}=Running", "--timeout=110s").CombinedOutput(); err != nil {
			t.Fatalf("waiting for the pod to run: %v\n%s", err, out)
		}
		waitAllowed(t, cp, "create", "pods/exec", "tpm-alice", "tpm-users")
		// kubectl's exec is a WebSocket (v5.channel.k8s.io), which kube-apiserver
		// translates to SPDY for the kubelet, or, with the WebSocket client off, SPDY all
		// the way: the proxy carries both upgrades.
		for _, env := range []string{"", "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false "} {
			script := env + kubectl + " exec tpm-exec -n default -- /testimage echo run for tpm-alice"
			out, errOut, err := run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "tpm", "--", "sh", "-c", script)
			if err != nil || out != "run for tpm-alice\n" {
				t.Errorf("%s: %q, %v; want the container's output and exit 0\n%s", script, out, err, errOut)
			}
		}
		// Both ways: kubectl sends its stdin on the stream and closes it at the end (which
		// only v5 of the WebSocket protocol can say), and the container copies it back
		// until then.
		script := `printf 'one\ntwo\n' | ` + kubectl + ` exec -i -v=4 tpm-exec -n default -- /testimage cat`
		out, errOut, err := run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "tpm", "--", "sh", "-c", script)
		if err != nil || out != "one\ntwo\n" || !strings.Contains(errOut, `"Subprotocol negotiated" protocol="v5.channel.k8s.io"`) {
			t.Errorf("%s: %q, %v; want stdin back, exit 0, and the WebSocket protocol v5 in the log\n%s", script, out, err, errOut)
		}
	})

	t.Run("a renewed certificate is used without restarting the proxy", func(t *testing.T) {
		// The same TPM key, a new certificate (new serial, another group) renamed over the
		// old one while kubectl watches config maps through the proxy.
		admin(t, "create", "role", "tpm-configmaps", "-n", "default", "--verb=get,list,watch", "--resource=configmaps")
		admin(t, "create", "rolebinding", "tpm-configmaps", "-n", "default", "--role=tpm-configmaps", "--group=tpm-users")
		admin(t, "create", "configmap", "tpm-before-renewal", "-n", "default")
		waitAllowed(t, cp, "watch", "configmaps", "tpm-alice", "tpm-users")
		renewed := issue("alice-2", "tpm-alice", "tpm-renewed", alicePub)
		watchOut := filepath.Join(dir, "watch.out")
		w := kubectl + " auth whoami -o jsonpath='{.status.userInfo.username} {.status.userInfo.groups[0]}'; echo"
		script := strings.Join([]string{
			kubectl + ` get configmaps -n default --watch -o name > ` + watchOut + ` & watch=$!`,
			`for i in $(seq 100); do [ -s ` + watchOut + ` ] && break; sleep 0.1; done`, // the watch lists tpm-before-renewal first
			w,
			`cp ` + renewed + ` ` + rotating + `.new && mv ` + rotating + `.new ` + rotating,
			`sleep 3`, // the proxy checks the certificate every 2s
			w,
			`echo ready > ` + watchOut + `.rotated`,
			`for i in $(seq 150); do grep -q tpm-after-renewal ` + watchOut + ` && break; sleep 0.1; done`,
			`kill $watch`, // fails if the watch has ended
		}, "\n")
		done := make(chan struct{})
		var out, errOut string
		var err error
		go func() {
			defer close(done)
			out, errOut, err = run(t, kplug, "run", "--kubeconfig", kubeconfig, "--context", "tpm-rotating", "--", "sh", "-c", script)
		}()
		for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if _, err := os.Stat(watchOut + ".rotated"); err == nil {
				break
			}
		}
		admin(t, "create", "configmap", "tpm-after-renewal", "-n", "default")
		<-done
		if err != nil || out != "tpm-alice tpm-users\ntpm-alice tpm-renewed\n" {
			t.Errorf("whoami before and after the renewal: %q, %v; want the group of each certificate\n%s", out, err, errOut)
		}
		if b, _ := os.ReadFile(watchOut); !strings.Contains(string(b), "configmap/tpm-after-renewal") {
			t.Errorf("the watch opened before the renewal missed the config map created after it: %q", b)
		}
	})

	t.Run("KEP-6308 signature made in the TPM", func(t *testing.T) {
		signingCA, err := cp.PKI.NewCA("tpm-signing-ca", "kplug-e2e TPM signing CA")
		if err != nil {
			t.Fatal(err)
		}
		cert, err := signingCA.IssueFor("alice-signing", &x509.Certificate{Subject: pkix.Name{CommonName: "tpm-alice", Organization: []string{"signers"}}}, alicePub, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		proxy := startSignatureProxy(t, cp, signingCA.File)
		front := frontKubeconfig(t, proxy.URL, cp.PKI.ClusterCA.Cert, dir, map[string]*clientcmdapi.ExecConfig{
			"tpm-signing": proxyExec(kplug, nil, "--sign", "rfc9421", "--sign-key", aliceKey, "--sign-cert", cert, "--sign-audience", signatureAudience),
		})
		admin(t, "create", "role", "signers-configmaps", "-n", "default", "--verb=create,get", "--resource=configmaps")
		admin(t, "create", "rolebinding", "signers-configmaps", "-n", "default", "--role=signers-configmaps", "--group=signers")
		waitAllowed(t, cp, "create", "configmaps", "sig:tpm-alice", "signers")
		script := kubectl + " auth whoami -o jsonpath={.status.userInfo.username}; echo; " +
			kubectl + " create configmap signed-by-tpm --from-literal=k=v -o name"
		out, errOut, err := run(t, kplug, "run", "--kubeconfig", front, "--context", "tpm-signing", "--", "sh", "-c", script)
		if err != nil || out != "sig:tpm-alice\nconfigmap/signed-by-tpm\n" {
			t.Errorf("whoami and a create (with content-digest) through signature-proxy: %q, %v\n%s", out, err, errOut)
		}
	})
	t.Run("errors name the key or the TPM", func(t *testing.T) {
		// A TPM of its own: wrong auth values count towards its dictionary-attack lockout.
		other := swtpm.NewTestTPM(t)
		carolKey, carolPub := keyFile(other, "carol", "1234")
		carolCert := issue("carol", "tpm-carol", "tpm-users", carolPub)
		errDir := t.TempDir()
		right, wrong := filepath.Join(errDir, "right-pin"), filepath.Join(errDir, "wrong-pin")
		writeBytes(t, right, []byte("1234\n"))
		writeBytes(t, wrong, []byte("0000\n"))
		noTPM := filepath.Join(errDir, "no-tpm-here")
		uri := func(device, pin string) string {
			return "tpm:file=" + carolKey + "?device=" + device + "&pin-source=file:" + pin
		}
		kc := proxyKubeconfig(t, cp, kplug, errDir, map[string][]string{
			"right-pin": {"--client-cert", carolCert, "--client-key", uri(other.Socket, right)},
			"wrong-pin": {"--client-cert", carolCert, "--client-key", uri(other.Socket, wrong)},
			"no-tpm":    {"--client-cert", carolCert, "--client-key", uri(noTPM, right)},
		})
		if out, errOut, err := run(t, kplug, append([]string{"run", "--kubeconfig", kc, "--context", "right-pin", "--", kubectl}, whoami...)...); err != nil || out != "tpm-carol tpm-users" {
			t.Errorf("whoami with the key's auth value: %q, %v\n%s", out, err, errOut)
		}
		for context, want := range map[string]string{
			"wrong-pin": "tpm: TPM key file " + carolKey + " on " + other.Socket + " refused the auth value (wrong PIN): give the key's auth value with pin-source=file:PATH or $KPLUG_TPM_PIN: TPM_RC_AUTH_FAIL",
			"no-tpm":    "tpm: no TPM at " + noTPM + ": nothing is there; check the device= of the tpm: URI or $KPLUG_TPM_DEVICE",
		} {
			out, errOut, err := run(t, kplug, append([]string{"run", "--kubeconfig", kc, "--context", context, "--", kubectl}, whoami...)...)
			checkKeyError(t, "kplug run -- kubectl ("+context+")", out, errOut, err, want, 2,
				`Error: execcred: plugin "`+kplug+`" exited with code 2 (its stderr is above)`)
			// Stock kubectl, which runs the plugin itself, shows the plugin's message.
			out, errOut, err = run(t, kubectl, append([]string{"--kubeconfig", kc, "--context", context}, whoami...)...)
			checkKeyError(t, "kubectl ("+context+")", out, errOut, err, want, 1,
				"Unable to connect to the server: getting credentials: exec: executable "+kplug+" failed with exit code 2")
		}
	})

	t.Run("a busy TPM", func(t *testing.T) {
		<-busyDone
		checkKeyError(t, "kplug run -- kubectl with the TPM held by another program", busy.out, busy.errOut, busy.err,
			"tpm: TPM key file "+busyKey+" on "+busyTPM.Socket+": creating its parent, the storage root key, in the owner hierarchy: the TPM socket "+busyTPM.Socket+" did not answer within 30s: it is busy (swtpm serves one connection at a time, and another program holds it) or hung", 2,
			`Error: execcred: plugin "`+kplug+`" exited with code 2 (its stderr is above)`)
	})
	waitNoSockets(t, filepath.Join(runtimeDir, "kplug"), 5*time.Second)
	if out, err := tpm.Tool("getcap", "handles-transient"); err != nil || len(out) != 0 {
		t.Errorf("transient objects left in the TPM after every proxy exited: %q, %v", out, err)
	}
}

// checkKeyError checks that a command failed as a key that cannot be opened makes it fail:
// exit code, nothing on stdout, and on stderr the message naming the key or the TPM,
// once, followed by the line of the program that ran kplug saying that kplug failed.
func checkKeyError(t *testing.T, what, out, errOut string, err error, want string, code int, last string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if exitCode(err) != code || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "Error: --client-key: "+want) || lines[1] != last {
		t.Errorf("%s: exit %d, stdout %q, stderr:\n%s\nwant exit %d and the lines\nError: --client-key: %s...\n%s", what, exitCode(err), out, errOut, code, want, last)
	}
}

// waitAllowed waits until RBAC allows user in group to verb resource in default, as the
// authorizer's cache catches up with a new binding.
func waitAllowed(t *testing.T, cp *framework.ControlPlane, verb, resource, user, group string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, _ := cp.Kubectl(t.Context(), cp.Admin, "auth", "can-i", verb, resource, "-n", "default", "--as="+user, "--as-group="+group).Output()
		if strings.TrimSpace(string(out)) == "yes" {
			return
		}
	}
	t.Fatalf("%s in %s may not %s %s after 20s", user, group, verb, resource)
}
