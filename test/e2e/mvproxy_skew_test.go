package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/internal/version"
	"github.com/kplug/kplug/test/e2e/framework"
)

// What differs between kube-apiserver 1.35.4 and 1.36.3 (docs/mixed-version-proxy.md,
// "Version skew", checked by logSkew): by default, 1.36 serves MutatingAdmissionPolicy
// and its bindings in admissionregistration.k8s.io/v1, GA in 1.36, and 1.35 does not;
// with the scheduling alpha API on (the GenericWorkload gate and its runtime-config),
// 1.35 serves scheduling.k8s.io/v1alpha1 (workloads), which 1.36 dropped for v1alpha2
// (workloads, and podgroups, new).
var (
	mutatingPoliciesV1 = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}
	workloadsV1alpha1  = schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha1", Resource: "workloads"}
	podGroupsV1alpha2  = schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups"}
)

// clusterScoped are the resources of the test that no namespace holds.
var clusterScoped = map[schema.GroupVersionResource]bool{mutatingPoliciesV1: true}

const mutatingPolicyManifest = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: %s
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"skew": "seen"}}}'
`

func skewServers() (previous, current framework.ServerOptions) {
	gates := map[string]bool{"GenericWorkload": true}
	previous = framework.ServerOptions{Version: version.KubernetesPrevious, FeatureGates: gates,
		Flags: []string{"--runtime-config=scheduling.k8s.io/v1alpha1=true"}}
	current = framework.ServerOptions{FeatureGates: gates,
		Flags: []string{"--runtime-config=scheduling.k8s.io/v1alpha2=true"}}
	return previous, current
}

// TestMixedVersionProxyUpgrade walks an HA control plane of two kube-apiservers from the
// previous minor release to the current one, one server at a time, each with a kplug
// peerproxy beside it, while clients write and read through both sidecars. It checks
// that no request for a resource some running server serves gets a 404, that every write
// a client was told succeeded is there at the end, and that each version's resources are
// reachable through either sidecar while the two versions run side by side.
func TestMixedVersionProxyUpgrade(t *testing.T) {
	framework.ToolForTest(t, "kube-apiserver-"+version.KubernetesPrevious)
	previous, current := skewServers()
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{previous, previous}})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	sides := []*sidecar{startSidecar(t, cp, 0), startSidecar(t, cp, 1)}
	admin := userClient(t, cp, cp.Admin)
	for i := range sides {
		eventually(ctx, t, fmt.Sprintf("sidecar %d serves", i), func() error {
			return expectStatus(ctx, admin, sides[i].URL+"/api/v1/namespaces/default/configmaps", nil, http.StatusOK)
		})
	}
	clients := make([]sidecarClients, len(sides))
	for i, s := range sides {
		clients[i] = newSidecarClients(t, cp, s)
	}
	if _, err := clients[0].core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "upgrade"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	traffic := startTraffic(ctx, clients, "upgrade")
	podGroup := func(name string) *unstructured.Unstructured {
		return object("scheduling.k8s.io/v1alpha2", "PodGroup", name, map[string]any{
			"schedulingPolicy": map[string]any{"basic": map[string]any{}},
		})
	}

	// No v1alpha1 workload is ever stored: kube-apiserver 1.36 cannot decode one (its scheme
	// has no v1alpha1) and does not become ready while etcd holds one, as alpha APIs have
	// no upgrade path. Reads show where each version is served.
	for i := range sides {
		if _, err := clients[i].dyn.Resource(workloadsV1alpha1).Namespace("upgrade").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("listing v1alpha1 workloads through sidecar %d before the upgrade: %v", i, err)
		}
	}
	traffic.expectServed(0, workloadsV1alpha1)
	traffic.expectServed(1, workloadsV1alpha1)

	t.Logf("replacing %s (%s) by %s", cp.Servers[0].Name, cp.Servers[0].Version(), version.Kubernetes)
	cp.Servers[0].Stop()
	if err := cp.Replace(ctx, 0, current); err != nil {
		t.Fatal(err)
	}

	// Mixed: each version's resources through the sidecar of the server that lacks them.
	eventually(ctx, t, "podgroups (v1alpha2, new in 1.36) created through the sidecar of the 1.35 server", func() error {
		_, err := clients[1].dyn.Resource(podGroupsV1alpha2).Namespace("upgrade").Create(ctx, podGroup("mixed"), metav1.CreateOptions{})
		return err
	})
	traffic.expectServed(1, podGroupsV1alpha2)
	traffic.expectServed(0, podGroupsV1alpha2)
	// MutatingAdmissionPolicy, new in a group and version both servers serve, is in the
	// merged discovery of the 1.35 server's sidecar too: kubectl finds it there.
	kubeconfigs := sidecarKubeconfigs(t, cp, sides)
	applyPolicy := func(i int, name string) error {
		cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig="+kubeconfigs[cp.Admin.Name],
			fmt.Sprintf("--context=sidecar-%d", i), "--cache-dir="+filepath.Join(t.TempDir(), "cache"), "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(fmt.Sprintf(mutatingPolicyManifest, name))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl apply through sidecar %d: %w\n%s", i, err, out)
		}
		return nil
	}
	eventually(ctx, t, "a MutatingAdmissionPolicy applied with kubectl through the sidecar of the 1.35 server", func() error {
		return applyPolicy(1, "via-old")
	})
	traffic.expectServed(0, mutatingPoliciesV1)
	traffic.expectServed(1, mutatingPoliciesV1)
	for i := range sides {
		out, err := kubectl(ctx, cp, kubeconfigs[cp.Admin.Name], i, "get", "mutatingadmissionpolicies", "-o", "name")
		if err != nil || !strings.Contains(string(out), "mutatingadmissionpolicy.admissionregistration.k8s.io/via-old") {
			t.Errorf("kubectl get mutatingadmissionpolicies through sidecar %d: %v\n%s", i, err, out)
		}
	}
	// v1alpha1 workloads stay served through both sidecars (the traffic checks it): the
	// 1.36 server's sidecar sends them to the 1.35 server.
	before := metricSum(ctx, t, sides[0].Metrics, "apiserver_rerouted_request_total", `version="v1alpha1"`)
	if _, err := clients[0].dyn.Resource(workloadsV1alpha1).Namespace("upgrade").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing v1alpha1 workloads through the sidecar of the 1.36 server: %v", err)
	}
	if after := metricSum(ctx, t, sides[0].Metrics, "apiserver_rerouted_request_total", `version="v1alpha1"`); after <= before {
		t.Errorf("v1alpha1 workloads were not rerouted from the 1.36 server (%v before, %v after)", before, after)
	}
	logSkew(ctx, t, admin, cp)
	// podgroups are in a version the 1.35 server does not serve of a group it serves:
	// its sidecar never lists such a version (a peer could make it the preferred one), so
	// kubectl reaches podgroups there by path.
	for i := range sides {
		out, err := kubectl(ctx, cp, kubeconfigs[cp.Admin.Name], i, "get", "--raw", "/apis/scheduling.k8s.io/v1alpha2/namespaces/upgrade/podgroups")
		if err != nil || !strings.Contains(string(out), `"name":"mixed"`) {
			t.Errorf("kubectl get --raw podgroups through sidecar %d: %v\n%s", i, err, out)
		}
	}
	time.Sleep(3 * time.Second) // traffic through the mixed control plane

	t.Logf("replacing %s (%s) by %s", cp.Servers[1].Name, cp.Servers[1].Version(), version.Kubernetes)
	cp.Servers[1].Stop()
	traffic.notServed(workloadsV1alpha1) // its last server is gone: 503 while peers remember it, then 404
	if err := cp.Replace(ctx, 1, current); err != nil {
		t.Fatal(err)
	}
	for i := range sides {
		eventually(ctx, t, fmt.Sprintf("v1alpha1 workloads through sidecar %d after the upgrade: 404, as no server serves them", i), func() error {
			_, err := clients[i].dyn.Resource(workloadsV1alpha1).Namespace("upgrade").List(ctx, metav1.ListOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("got %w, want 404", err)
			}
			return nil
		})
	}
	time.Sleep(3 * time.Second) // traffic through the upgraded control plane
	if err := applyPolicy(1, "after"); err != nil {
		t.Error(err)
	}
	report := traffic.stop()
	t.Log(report.summary())
	if len(report.wrong404) > 0 {
		t.Errorf("404 for resources a running server served:\n%s", strings.Join(report.wrong404, "\n"))
	}
	report.checkWrites(ctx, t, cp, "upgrade")
	// podgroups created through either sidecar are all there, read through the other.
	l, err := clients[0].dyn.Resource(podGroupsV1alpha2).Namespace("upgrade").List(ctx, metav1.ListOptions{})
	if err != nil || !slices.Contains(itemNames(l), "mixed") {
		t.Errorf("podgroups after the upgrade: %v, %v", itemNames(l), err)
	}
}

func object(apiVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
}

func itemNames(l *unstructured.UnstructuredList) []string {
	if l == nil {
		return nil
	}
	var names []string
	for _, o := range l.Items {
		names = append(names, o.GetName())
	}
	return names
}

// sidecarClients are the admin's clients through one sidecar.
type sidecarClients struct {
	core *kubernetes.Clientset
	dyn  *dynamic.DynamicClient
}

func newSidecarClients(t *testing.T, cp *framework.ControlPlane, s *sidecar) sidecarClients {
	t.Helper()
	cfg := cp.RESTConfig(cp.Admin, 0)
	cfg.Host = s.URL
	cfg.Timeout = 30 * time.Second
	return sidecarClients{core: kubernetes.NewForConfigOrDie(cfg), dyn: dynamic.NewForConfigOrDie(rest.CopyConfig(cfg))}
}

// traffic is clients writing and reading through each sidecar while a test changes the
// control plane under them: per sidecar, one writer creating uniquely named ConfigMaps and
// one reader listing ConfigMaps and every resource the test said a running server serves.
type traffic struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	served   map[schema.GroupVersionResource]map[int]bool // by sidecar: must not 404 there
	created  []string                                     // ConfigMaps whose create succeeded
	failed   map[string]error                             // ConfigMaps whose create failed, and why
	errors   map[string]int                               // failed requests by kind
	wrong404 []string
	requests int
}

func startTraffic(ctx context.Context, clients []sidecarClients, namespace string) *traffic {
	ctx, cancel := context.WithCancel(ctx)
	tr := &traffic{cancel: cancel, served: map[schema.GroupVersionResource]map[int]bool{}, failed: map[string]error{}, errors: map[string]int{}}
	for i, c := range clients {
		tr.wg.Add(2)
		go func() {
			defer tr.wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				name := fmt.Sprintf("via-sidecar-%d-%04d", i, n)
				_, err := c.core.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": fmt.Sprint(n)},
				}, metav1.CreateOptions{})
				if ctx.Err() != nil {
					return
				}
				tr.record(i, "create configmaps", err, true)
				tr.mu.Lock()
				if err == nil {
					tr.created = append(tr.created, name)
				} else {
					tr.failed[name] = err
				}
				tr.mu.Unlock()
				pause(ctx, 40*time.Millisecond)
			}
		}()
		go func() {
			defer tr.wg.Done()
			for ctx.Err() == nil {
				_, err := c.core.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{Limit: 1})
				if ctx.Err() != nil {
					return
				}
				tr.record(i, "list configmaps", err, true)
				for _, gvr := range tr.servedAt(i) {
					rc := c.dyn.Resource(gvr).Namespace(namespace)
					if clusterScoped[gvr] {
						rc = c.dyn.Resource(gvr)
					}
					_, err := rc.List(ctx, metav1.ListOptions{Limit: 1})
					if ctx.Err() != nil {
						return
					}
					tr.record(i, "list "+gvr.String(), err, tr.isServed(i, gvr))
				}
				pause(ctx, 40*time.Millisecond)
			}
		}()
	}
	return tr
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// expectServed says that from now on, gvr must not get a 404 through sidecar i.
func (tr *traffic) expectServed(i int, gvr schema.GroupVersionResource) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.served[gvr] == nil {
		tr.served[gvr] = map[int]bool{}
	}
	tr.served[gvr][i] = true
}

// notServed says that gvr may get a 404 through any sidecar from now on.
func (tr *traffic) notServed(gvr schema.GroupVersionResource) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delete(tr.served, gvr)
}

func (tr *traffic) servedAt(i int) []schema.GroupVersionResource {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []schema.GroupVersionResource
	for gvr, at := range tr.served {
		if at[i] {
			out = append(out, gvr)
		}
	}
	return out
}

func (tr *traffic) isServed(i int, gvr schema.GroupVersionResource) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.served[gvr][i]
}

// record counts one request through sidecar i; a 404 is wrong when mustServe.
func (tr *traffic) record(i int, what string, err error, mustServe bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.requests++
	if err == nil {
		return
	}
	kind := errorKind(err)
	tr.errors[what+": "+kind]++
	if mustServe && apierrors.IsNotFound(err) {
		tr.wrong404 = append(tr.wrong404, fmt.Sprintf("%s through sidecar %d at %s: %v", what, i, time.Now().Format("15:04:05.000"), err))
	}
}

func errorKind(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return fmt.Sprintf("%d %s", status.Status().Code, status.Status().Reason)
	}
	return "transport error"
}

type trafficReport struct {
	requests int
	created  []string
	failed   map[string]error
	errors   map[string]int
	wrong404 []string
}

func (tr *traffic) stop() trafficReport {
	tr.cancel()
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return trafficReport{requests: tr.requests, created: tr.created, failed: tr.failed, errors: tr.errors, wrong404: tr.wrong404}
}

func (r trafficReport) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests, %d ConfigMaps created, %d creates failed", r.requests, len(r.created), len(r.failed))
	for _, k := range slices.Sorted(mapKeys(r.errors)) {
		fmt.Fprintf(&b, "\n  %s: %d", k, r.errors[k])
	}
	return b.String()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkWrites reads every ConfigMap in namespace straight from apiserver 0 and checks that
// each create a client was told succeeded is there, and that a create the sidecar refused
// before forwarding (a 503 it answered itself) left nothing behind.
func (r trafficReport) checkWrites(ctx context.Context, t *testing.T, cp *framework.ControlPlane, namespace string) {
	t.Helper()
	direct := kubernetes.NewForConfigOrDie(cp.RESTConfig(cp.Admin, 0))
	l, err := direct.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, cm := range l.Items {
		have[cm.Name] = true
	}
	var lost []string
	for _, name := range r.created {
		if !have[name] {
			lost = append(lost, name)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d acknowledged writes are missing: %v", len(lost), len(r.created), lost)
	}
	for name, err := range r.failed {
		if have[name] && strings.Contains(err.Error(), "mvproxy:") {
			t.Errorf("%s: the sidecar answered %v, but the ConfigMap was written", name, err)
		}
	}
	if len(r.created) == 0 {
		t.Error("no write succeeded")
	}
}

// logSkew logs the group/version/resources one server serves and the other does not.
func logSkew(ctx context.Context, t *testing.T, c *http.Client, cp *framework.ControlPlane) {
	t.Helper()
	served := make([]map[string]bool, len(cp.Servers))
	for i, s := range cp.Servers {
		served[i] = map[string]bool{}
		code, body := get(ctx, t, c, s.URL+"/apis", http.Header{"Accept": {acceptAggregated + ";profile=nopeer"}})
		if code != http.StatusOK {
			t.Fatalf("%s/apis: %d", s.URL, code)
		}
		var l apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatal(err)
		}
		for _, g := range l.Items {
			for _, v := range g.Versions {
				for _, r := range v.Resources {
					served[i][g.Name+"/"+v.Version+"/"+r.Resource] = true
				}
			}
		}
	}
	for i := range served {
		var only []string
		for gvr := range served[i] {
			if !served[1-i][gvr] {
				only = append(only, gvr)
			}
		}
		slices.Sort(only)
		t.Logf("only %s (%s) serves %v", cp.Servers[i].Name, cp.Servers[i].Version(), only)
	}
}
