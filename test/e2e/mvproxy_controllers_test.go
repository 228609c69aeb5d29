package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kplug/kplug/test/e2e/framework"
)

// TestMixedVersionProxyControllers runs the KEP's user stories with the real controllers:
// kube-controller-manager's namespace controller and garbage collector talk to the sidecar
// of an apiserver that does not serve batch/v1, while its peer does. Through the sidecar's
// merged discovery they learn that jobs exist, and their requests for jobs are routed to
// the peer: deleting a namespace that holds jobs completes with the jobs gone, and the
// garbage collector deletes jobs whose owner is gone, and ConfigMaps whose owner job is.
// Against that apiserver directly, both controllers would not know jobs exist.
func TestMixedVersionProxyControllers(t *testing.T) {
	framework.ToolForTest(t, "kube-controller-manager")
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{
		{},
		{Flags: []string{"--runtime-config=batch/v1=false"}},
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	sides := []*sidecar{startSidecar(t, cp, 0), startSidecar(t, cp, 1)}
	admin := userClient(t, cp, cp.Admin)
	eventually(ctx, t, "jobs through the sidecar of the server without batch/v1", func() error {
		return expectStatus(ctx, admin, sides[1].URL+jobsPath, nil, http.StatusOK)
	})
	// What the controllers would see without the sidecar.
	if local := discoveryGroups(ctx, t, admin, cp.Servers[1].URL, acceptAggregated+";profile=nopeer"); slices.Contains(local, "batch") {
		t.Fatalf("apiserver-1 serves batch: %v", local)
	}
	// The controllers reach the sidecar through a recorder of the discovery media types
	// they ask for.
	recorder := newAcceptRecorder(t, cp, sides[1].URL)
	kcm, err := cp.StartControllerManager(ctx, framework.ControllerManagerOptions{
		Server:      recorder.URL,
		Controllers: []string{"namespace-controller", "garbage-collector-controller"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kcm.Stop() // before the recorder, which waits for the controllers' watches to end
		if t.Failed() {
			t.Logf("kube-controller-manager log: %s", kcm.LogPath())
		}
	})
	viaSidecar := newSidecarClients(t, cp, sides[1]).core
	direct := kubernetes.NewForConfigOrDie(cp.RESTConfig(cp.Admin, 0)) // the server that stores jobs
	rerouted := func() float64 {
		return metricSum(ctx, t, sides[1].Metrics, "apiserver_rerouted_request_total", `group="batch"`)
	}

	t.Run("namespace deletion removes jobs only a peer serves", func(t *testing.T) {
		ns := createNamespace(ctx, t, viaSidecar, "doomed")
		for i := range 3 {
			createJob(ctx, t, viaSidecar, ns, fmt.Sprintf("job-%d", i), nil)
		}
		before := rerouted()
		if err := viaSidecar.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, 2*time.Minute, "namespace "+ns+" to be deleted", func() error {
			_, err := direct.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("namespace still there (%w)", err)
			}
			return nil
		})
		jobs, err := direct.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(jobs.Items) != 0 {
			t.Errorf("jobs left in etcd after the namespace was deleted: %d, %v", len(jobs.Items), err)
		}
		if after := rerouted(); after <= before {
			t.Errorf("the namespace controller's job requests were not rerouted (%v before, %v after)", before, after)
		}
	})

	t.Run("the discovery media types real clients ask for", func(t *testing.T) {
		kcmAccepts := recorder.accepts()
		kubeconfigs := sidecarKubeconfigs(t, cp, []*sidecar{{URL: recorder.URL}})
		if out, err := kubectl(ctx, cp, kubeconfigs[cp.Admin.Name], 0, "api-resources", "-o", "name"); err != nil {
			t.Fatalf("kubectl api-resources through the recorder: %v\n%s", err, out)
		}
		kubectlAccepts := recorder.accepts()[len(kcmAccepts):]
		for who, got := range map[string][]string{"kube-controller-manager": kcmAccepts, "kubectl": kubectlAccepts} {
			t.Logf("%s asked for /apis with Accept %q", who, slices.Compact(slices.Sorted(slices.Values(got))))
			if len(got) == 0 {
				t.Errorf("%s never asked for /apis", who)
			}
			for _, a := range got {
				// Both ask for JSON aggregated discovery first, so they get the merge.
				if !strings.HasPrefix(a, acceptAggregated) {
					t.Errorf("%s asked for /apis with Accept %q", who, a)
				}
			}
		}
	})

	t.Run("garbage collection of and by jobs only a peer serves", func(t *testing.T) {
		ns := createNamespace(ctx, t, viaSidecar, "gc")
		// A job whose owner, a ConfigMap, is deleted.
		owner, err := viaSidecar.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		createJob(ctx, t, viaSidecar, ns, "dependent", []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}})
		// ConfigMaps whose owner, a job, is deleted.
		job := createJob(ctx, t, viaSidecar, ns, "owner-job", nil)
		for i := range 2 {
			_, err := viaSidecar.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name:            fmt.Sprintf("owned-by-job-%d", i),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID}},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
		background := metav1.DeletePropagationBackground
		if err := viaSidecar.CoreV1().ConfigMaps(ns).Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
			t.Fatal(err)
		}
		if err := viaSidecar.BatchV1().Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, 2*time.Minute, "the garbage collector to delete the dependents", func() error {
			var left []string
			if _, err := direct.BatchV1().Jobs(ns).Get(ctx, "dependent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, fmt.Sprintf("job dependent (%v)", err))
			}
			cms, err := direct.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, cm := range cms.Items {
				if cm.Name != "kube-root-ca.crt" {
					left = append(left, "configmap "+cm.Name)
				}
			}
			if len(left) > 0 {
				return fmt.Errorf("still there: %v", left)
			}
			return nil
		})
	})
}

func createNamespace(ctx context.Context, t *testing.T, c kubernetes.Interface, name string) string {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func createJob(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string, owners []metav1.OwnerReference) *batchv1.Job {
	t.Helper()
	job, err := c.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "c", Image: "registry.example/none"}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating job %s/%s: %v", ns, name, err)
	}
	return job
}

// waitFor retries f every half second until it succeeds or timeout passes.
func waitFor(ctx context.Context, t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// metricSum adds up the samples of the counter name scraped from url whose labels contain
// label (e.g. `group="batch"`).
func metricSum(ctx context.Context, t *testing.T, url, name, label string) float64 {
	t.Helper()
	code, body, err := do(ctx, http.DefaultClient, url, nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, code, err)
	}
	return sumSamples(t, body, name, label)
}

// sumSamples adds up the samples of the counter name in a Prometheus text exposition
// whose labels contain label.
func sumSamples(t *testing.T, exposition, name, label string) float64 {
	t.Helper()
	var sum float64
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, label) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// acceptRecorder is a TLS reverse proxy in front of a sidecar that records the Accept
// header of every GET /apis; it forwards as the admin (the only user that goes through it).
type acceptRecorder struct {
	URL string
	mu  sync.Mutex
	got []string
}

func newAcceptRecorder(t *testing.T, cp *framework.ControlPlane, target string) *acceptRecorder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &acceptRecorder{}
	admin, err := tls.X509KeyPair(cp.Admin.Cert.CertPEM, cp.Admin.Cert.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cp.PKI.ClusterCA.Pool(), Certificates: []tls.Certificate{admin}, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	srv := httptest.NewUnstartedServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			if pr.In.URL.Path == "/apis" {
				r.mu.Lock()
				r.got = append(r.got, pr.In.Header.Get("Accept"))
				r.mu.Unlock()
			}
			pr.SetURL(u)
		},
		Transport:     tr,
		FlushInterval: -1,
	})
	serving, err := tls.LoadX509KeyPair(cp.PKI.Serving.CertFile, cp.PKI.Serving.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *acceptRecorder) accepts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}
