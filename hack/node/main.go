// Command node shows the real kubelet running kplug's image credential provider: it starts
// a control plane (etcd, kube-apiserver with the Node authorizer and NodeRestriction), an
// OCI registry that wants a password, a token endpoint, and a node (kubelet v1.36 with
// containerd 2 and runc) whose --image-credential-provider-config is the file of
// docs/image-credential-node/; then a pod whose service account carries the provider's
// annotation pulls the private image and runs. `make node` runs it, as root.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kplug/kplug/internal/testkit/registrytest"
	"github.com/kplug/kplug/test/e2e/framework"
)

const (
	docsDir      = "docs/image-credential-node"
	docsEndpoint = "https://sts.registry.example/token"
	image        = "registry.example/team/app:v1"
)

func main() {
	binDir := flag.String("bin-dir", "", "directory with etcd, kube-apiserver, kubectl, kubelet, containerd, crictl and kplug (default: _output/bin)")
	wait := flag.Bool("wait", false, "keep the node running until interrupted")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *binDir, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, binDir string, wait bool) error {
	if os.Geteuid() != 0 {
		return errors.New("the kubelet and containerd need root: run `sudo make node`")
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "node: "+format+"\n", args...) }
	start := time.Now()
	logf("starting etcd and kube-apiserver (Node authorizer, NodeRestriction)...")
	cp, err := framework.Start(ctx, framework.Options{BinDir: binDir, Logf: logf, Servers: []framework.ServerOptions{{Flags: []string{
		"--authorization-mode=Node", "--enable-admission-plugins=NodeRestriction"}}}})
	if err != nil {
		return err
	}
	defer func() {
		logf("stopping the node and the control plane...")
		cp.Stop()
		logf("stopped; nothing is left running")
	}()
	admin, err := kubernetes.NewForConfig(cp.RESTConfig(cp.Admin, 0))
	if err != nil {
		return err
	}

	// The private image, test/e2e/testimage, in a registry that wants a password.
	dir := filepath.Join(cp.Dir, "node-demo")
	pluginDir := filepath.Join(dir, "plugins")
	configDir := filepath.Join(dir, "credential-providers")
	for _, d := range []string{pluginDir, configDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	reg, err := registrytest.New(dir)
	if err != nil {
		return err
	}
	defer reg.Close()
	logrus.SetOutput(io.Discard) // the registry's log of each refused request
	prog, err := framework.BuildTestImageProgram(ctx, dir)
	if err != nil {
		return err
	}
	img, err := framework.StaticImage(prog, "app")
	if err != nil {
		return err
	}
	if err := reg.PushImage(ctx, reg.Host+"/team/app:v1", img); err != nil {
		return err
	}
	exchange := registrytest.StartTokenExchange(admin, "registry.example", reg.PullerPassword)
	defer exchange.Close()
	fmt.Printf("an OCI registry that wants a password at %s, serving registry.example to the node's containerd\n", reg.Host)
	fmt.Printf("a token endpoint that checks service-account tokens with TokenReview: %s\n\n", exchange.URL)

	// The docs' provider config, with this endpoint; kplug under the provider's name.
	doc, err := os.ReadFile(filepath.Join(docsDir, "kplug-token-exchange.yaml"))
	if err != nil {
		return err
	}
	config := filepath.Join(configDir, "kplug-token-exchange.yaml")
	if err := os.WriteFile(config, []byte(strings.Replace(string(doc), docsEndpoint, exchange.URL, 1)), 0o600); err != nil { //nolint:gosec // a path of the demo's own directory
		return err
	}
	kplug, err := filepath.Abs(filepath.Join(cp.BinDir, "kplug"))
	if err != nil {
		return err
	}
	if err := os.Symlink(kplug, filepath.Join(pluginDir, "kplug")); err != nil {
		return err
	}
	if err := show(ctx, filepath.Join(cp.BinDir, "kplug"), "image-credential", "validate", "--config", configDir); err != nil {
		return err
	}

	logf("starting containerd and the kubelet...")
	node, err := cp.StartNode(ctx, framework.NodeOptions{
		ImageCredentialProviderConfig: configDir,
		ImageCredentialProviderBinDir: pluginDir,
		RegistryHosts:                 map[string]string{"registry.example": reg.Host},
		Logf:                          logf,
	})
	if err != nil {
		return err
	}
	kubectl := func(args ...string) error {
		return show(ctx, filepath.Join(cp.BinDir, "kubectl"), append([]string{"--kubeconfig", cp.Admin.Kubeconfig}, args...)...)
	}
	if err := kubectl("get", "nodes", "-o", "wide"); err != nil {
		return err
	}
	if err := kubectl("apply", "-f", filepath.Join(docsDir, "node-rbac.yaml")); err != nil {
		return err
	}
	if err := createPod(ctx, admin, node.Name); err != nil {
		return err
	}
	fmt.Printf("a pod team/app of %s, whose service account team/puller has the annotation registry.example/identity\n\n", image)
	if err := waitRunning(ctx, admin); err != nil {
		_ = kubectl("get", "events", "-n", "team")
		return err
	}
	if err := kubectl("get", "pod", "-n", "team", "app", "-o", "wide"); err != nil {
		return err
	}
	if err := kubectl("get", "events", "-n", "team", "--field-selector", "involvedObject.name=app"); err != nil {
		return err
	}
	if calls := exchange.Calls(); len(calls) > 0 {
		fmt.Printf("the kubelet ran kplug, which traded a token of %s for audience registry.example, bound to the pod\n\n", calls[0].User)
	}
	cmd := node.Crictl(ctx, "images")
	fmt.Printf("$ crictl images\n")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return err
	}
	fmt.Println()
	logf("a node pulled a private image with its pod's service-account token in %v", time.Since(start).Round(time.Second))
	if wait {
		fmt.Printf("export KUBECONFIG=%s\n", cp.Admin.Kubeconfig)
		fmt.Printf("crictl: %s --runtime-endpoint %s ps\n", filepath.Join(cp.BinDir, "crictl"), node.CRIEndpoint)
		logf("the node keeps running; press Ctrl-C to stop it")
		<-ctx.Done()
	}
	return nil
}

// show prints a command and runs it with its output on ours.
func show(ctx context.Context, bin string, args ...string) error {
	fmt.Printf("$ %s %s\n", filepath.Base(bin), strings.Join(args, " "))
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...) //nolint:gosec // the demo's own binaries
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(bin), err)
	}
	fmt.Println()
	return nil
}

func createPod(ctx context.Context, client kubernetes.Interface, node string) error {
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "puller", Annotations: map[string]string{"registry.example/identity": "team-a"}}}
	if _, err := client.CoreV1().ServiceAccounts("team").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return err
	}
	automount := false
	_, err := client.CoreV1().Pods("team").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			NodeName: node, HostNetwork: true, ServiceAccountName: "puller", AutomountServiceAccountToken: &automount,
			Containers: []corev1.Container{{Name: "app", Image: image}},
		},
	}, metav1.CreateOptions{})
	return err
}

func waitRunning(ctx context.Context, client kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		p, err := client.CoreV1().Pods("team").Get(ctx, "app", metav1.GetOptions{})
		if err == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod team/app is not running after 2 minutes: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
