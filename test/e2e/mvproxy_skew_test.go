package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
	"github.com/kplug/kplug/test/e2e/traffic"
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
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
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

	tr := startSidecarTraffic(ctx, t, cp, sides, "upgrade")
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
	expectServed(tr, 0, workloadsV1alpha1)
	expectServed(tr, 1, workloadsV1alpha1)

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
	expectServed(tr, 1, podGroupsV1alpha2)
	expectServed(tr, 0, podGroupsV1alpha2)
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
	expectServed(tr, 0, mutatingPoliciesV1)
	expectServed(tr, 1, mutatingPoliciesV1)
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
	tr.NotServed(listPath(workloadsV1alpha1)) // its last server is gone: 503 while peers remember it, then 404
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
	finishTraffic(ctx, t, cp, tr)
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

// startSidecarTraffic starts traffic through each sidecar while a test changes the control
// plane under it: per sidecar, ConfigMaps created and listed in namespace, two watches of
// them, and the lists expectServed adds (package traffic checks what they are told).
func startSidecarTraffic(ctx context.Context, t *testing.T, cp *framework.ControlPlane, sides []*sidecar, namespace string) *traffic.Traffic {
	t.Helper()
	tc, err := cp.ClientTLS(cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	var loads []traffic.Load
	for i, s := range sides {
		loads = append(loads, traffic.Load{
			Name: fmt.Sprintf("sidecar-%d", i), Target: traffic.HTTPSTarget(fmt.Sprintf("sidecar-%d", i), s.URL, tc),
			Resource: traffic.ConfigMaps, Namespaces: []string{namespace},
			Rate: 40, Workers: 2, Mix: traffic.Mix{Create: 1, List: 1}, Watches: 1, WebSocketWatches: 1,
		})
	}
	tr, err := traffic.Start(ctx, traffic.Options{Loads: loads, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// expectServed says that from now on, gvr must not get a 404 through sidecar i.
func expectServed(tr *traffic.Traffic, i int, gvr schema.GroupVersionResource) {
	tr.ExpectServed(fmt.Sprintf("sidecar-%d", i), listPath(gvr))
}

// listPath is the collection of gvr in the namespace "upgrade", or cluster-wide.
func listPath(gvr schema.GroupVersionResource) string {
	if clusterScoped[gvr] {
		return "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
	}
	return "/apis/" + gvr.Group + "/" + gvr.Version + "/namespaces/upgrade/" + gvr.Resource
}

// finishTraffic stops the traffic and fails the test for every problem its checks found
// (reading from apiserver 0 directly): a 404 for what a running server served, an
// acknowledged write missing, a write told failed applied, a watch that missed an event.
func finishTraffic(ctx context.Context, t *testing.T, cp *framework.ControlPlane, tr *traffic.Traffic) *traffic.Report {
	t.Helper()
	tc, err := cp.ClientTLS(cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := tr.Finish(ctx, traffic.HTTPSTarget("direct", cp.Servers[0].URL, tc))
	if err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, l := range rep.Loads {
		created += l.ByOp["CREATE"].N
		t.Logf("%s: %d requests (%d ok, %d refused, %d unknown), %d watch events, %d resumes, %d relists; errors %v, watch errors %v",
			l.Name, l.Requests, l.OK, l.Refused, l.Unknown, l.Watches.Events, l.Watches.Resumes, l.Watches.Relists, l.Errors, l.Watches.Errors)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
	if created == 0 {
		t.Error("no write succeeded")
	}
	return rep
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
