package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/test/e2e/framework"
)

// notForThePeerproxy are kubeadm's files that the mixed version proxy has no use for,
// and that would make its compromise a worse one: the CAs' keys, the service-account
// signing key, the apiserver's other client keys, and the other components' kubeconfigs.
var notForThePeerproxy = []string{
	"/etc/kubernetes/pki/ca.key", "/etc/kubernetes/pki/sa.key", "/etc/kubernetes/pki/sa.pub",
	"/etc/kubernetes/pki/front-proxy-ca.key", "/etc/kubernetes/pki/etcd/",
	"/etc/kubernetes/pki/apiserver-kubelet-client.key", "/etc/kubernetes/pki/apiserver-etcd-client.key",
	"/etc/kubernetes/pki/kplug/peer-ca.key", "/etc/kubernetes/admin.conf", "/etc/kubernetes/super-admin.conf",
	"/etc/kubernetes/controller-manager.conf", "/etc/kubernetes/scheduler.conf", "/etc/kubernetes/kubelet.conf",
}

// TestSecurityPeerproxyPodMountsOnlyWhatItReads (finding N7) reads the static pod of
// deploy/peerproxy: the files it mounts are exactly those its flags name, each a
// read-only hostPath of type File (never a directory of keys), none of kubeadm's keys the
// sidecar has no use for; and it runs as a user that is not root, without privilege or
// capabilities, on a read-only root filesystem. TestDeployPeerproxy runs the pod's command
// that way.
func TestSecurityPeerproxyPodMountsOnlyWhatItReads(t *testing.T) {
	t.Parallel()
	pod := readPod(t, filepath.Join(moduleRoot(t), "deploy", "peerproxy", "kplug-peerproxy.yaml"))
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.InitContainers) != 0 {
		t.Fatalf("the pod has %d containers and %d init containers, want 1 and 0", len(pod.Spec.Containers), len(pod.Spec.InitContainers))
	}
	c := pod.Spec.Containers[0]
	read := map[string]bool{}
	for _, a := range c.Args {
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(v, "/") {
			read[v] = true
		}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		switch {
		case !ok:
			t.Errorf("mount %s names no volume", m.Name)
		case v.HostPath == nil:
			t.Errorf("volume %s is not a hostPath: %+v", m.Name, v.VolumeSource)
		case v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathFile:
			t.Errorf("volume %s mounts %s as %q, not as one file: a directory gives the pod every key in it", m.Name, v.HostPath.Path, ptr.Deref(v.HostPath.Type, ""))
		case v.HostPath.Path != m.MountPath || m.SubPath != "" || m.SubPathExpr != "":
			t.Errorf("mount %s: %s of the node at %s (subPath %q): want each file at its own path", m.Name, v.HostPath.Path, m.MountPath, m.SubPath)
		case !m.ReadOnly:
			t.Errorf("mount %s (%s) is writable", m.Name, m.MountPath)
		}
		mounted[m.MountPath] = true
		for _, bad := range notForThePeerproxy {
			if m.MountPath == bad || strings.HasPrefix(m.MountPath, bad) || (v.HostPath != nil && strings.HasPrefix(bad, strings.TrimSuffix(v.HostPath.Path, "/")+"/")) {
				t.Errorf("mount %s gives the pod %s", m.Name, bad)
			}
		}
	}
	if len(volumes) != len(c.VolumeMounts) {
		t.Errorf("%d volumes for %d mounts", len(volumes), len(c.VolumeMounts))
	}
	if diff := cmp.Diff(read, mounted); diff != "" {
		t.Errorf("the files the flags name (-) and the files mounted (+) differ:\n%s", diff)
	}

	ps, cs := pod.Spec.SecurityContext, c.SecurityContext
	if ps == nil || cs == nil {
		t.Fatal("the pod or its container has no securityContext")
	}
	nonRoot := func(id *int64) bool { return id != nil && *id != 0 }
	if ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || !nonRoot(ps.RunAsUser) || !nonRoot(ps.RunAsGroup) ||
		(cs.RunAsUser != nil && *cs.RunAsUser == 0) || (cs.RunAsNonRoot != nil && !*cs.RunAsNonRoot) {
		t.Errorf("the pod runs as root, or may: pod %+v, container %+v", ps, cs)
	}
	if cs.Privileged != nil && *cs.Privileged || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation ||
		cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem ||
		cs.Capabilities == nil || !slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(cs.Capabilities.Add) != 0 {
		t.Errorf("the container may gain privileges or write its root: %+v", cs)
	}
	if pod.Spec.HostPID || pod.Spec.HostIPC {
		t.Errorf("the pod shares the node's processes or IPC")
	}
}

// rbacManifests are the RBAC documents of every manifest and preset users apply.
func rbacManifests(t *testing.T) map[string][]rbacDoc {
	t.Helper()
	out := map[string][]rbacDoc{}
	for _, dir := range []string{"deploy", "docs"} {
		err := filepath.WalkDir(filepath.Join(moduleRoot(t), dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(moduleRoot(t), path)
			for i, doc := range strings.Split(string(data), "\n---\n") {
				if !strings.Contains(doc, "apiVersion: "+rbacv1.SchemeGroupVersion.String()) {
					continue // not RBAC (a pod, a kubelet config, the krew template)
				}
				var d rbacDoc
				if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
					return fmt.Errorf("%s, document %d: %w", rel, i+1, err)
				}
				if d.APIVersion == rbacv1.SchemeGroupVersion.String() {
					out[rel] = append(out[rel], d)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// rbacDoc is what the checks read of a Role, ClusterRole or binding.
type rbacDoc struct {
	APIVersion string              `json:"apiVersion"`
	Kind       string              `json:"kind"`
	Metadata   metav1.ObjectMeta   `json:"metadata"`
	Rules      []rbacv1.PolicyRule `json:"rules"`
	Subjects   []rbacv1.Subject    `json:"subjects"`
}

// TestSecurityRBACManifestsGrantNoServiceAccountAtLarge (finding N7) reads every RBAC
// manifest and preset users apply: none grants a wildcard or the power to escalate,
// bind or impersonate, and a grant of service-account tokens (the power to act as the
// account) names its accounts and is a Role, of one namespace.
func TestSecurityRBACManifestsGrantNoServiceAccountAtLarge(t *testing.T) {
	t.Parallel()
	files := rbacManifests(t)
	if len(files) < 7 {
		t.Fatalf("RBAC in %d files, want the deploy manifests' and the presets' (at least 7)", len(files))
	}
	for file, docs := range files {
		for _, d := range docs {
			for _, r := range d.Rules {
				where := fmt.Sprintf("%s: %s %s: rule %v on %v", file, d.Kind, d.Metadata.Name, r.Verbs, r.Resources)
				for _, list := range [][]string{r.Verbs, r.Resources, r.APIGroups, r.ResourceNames} {
					if slices.Contains(list, "*") {
						t.Errorf("%s: a wildcard", where)
					}
				}
				for _, v := range []string{"escalate", "bind", "impersonate"} {
					if slices.Contains(r.Verbs, v) {
						t.Errorf("%s: grants %s", where, v)
					}
				}
				if slices.Contains(r.Resources, "serviceaccounts/token") && slices.Contains(r.Verbs, "create") &&
					(d.Kind != "Role" || len(r.ResourceNames) == 0) {
					t.Errorf("%s: grants the tokens of every service account of %s; name them (resourceNames) in a Role per namespace",
						where, map[bool]string{true: "the namespaces it is bound in", false: "the cluster"}[d.Kind == "Role"])
				}
			}
		}
	}
}

// TestSecurityImageCredentialRBACNamesItsServiceAccounts (finding N7) applies
// docs/image-credential-presets/kplug-rbac.yaml as it is to kube-apiserver and checks
// what its subject may then do: request tokens of the accounts it names, in its
// namespace (for any audience, the API server's included: the token is that account,
// as the file says), and nothing of any other account, there or elsewhere.
func TestSecurityImageCredentialRBACNamesItsServiceAccounts(t *testing.T) {
	file := filepath.Join(presetDir, "kplug-rbac.yaml")
	var role rbacDoc
	var subject string
	for _, d := range rbacManifests(t)[filepath.Join("docs", "image-credential-presets", "kplug-rbac.yaml")] {
		switch d.Kind {
		case "Role":
			role = d
		case "RoleBinding":
			if len(d.Subjects) != 1 || d.Subjects[0].Kind != rbacv1.UserKind {
				t.Fatalf("the RoleBinding of %s binds %+v; want one User", file, d.Subjects)
			}
			subject = d.Subjects[0].Name
		}
	}
	ns := role.Metadata.Namespace
	var named []string
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "serviceaccounts/token") {
			named = r.ResourceNames
		}
	}
	if ns == "" || subject == "" || len(named) == 0 {
		t.Fatalf("%s: namespace %q, subject %q, accounts %v", file, ns, subject, named)
	}

	cp := framework.StartForTest(t, framework.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	admin := clientFor(t, cp, cp.Admin, 0)
	other := "elsewhere"
	for _, n := range []string{ns, other} {
		mustCreate(t, admin, n)
		for _, sa := range append([]string{"deployer"}, named...) {
			if _, err := admin.CoreV1().ServiceAccounts(n).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cert, err := cp.PKI.ClientCA.IssueClient("kplug-image-credentials", subject)
	if err != nil {
		t.Fatal(err)
	}
	kplug := clientFor(t, cp, &framework.User{Name: subject, Cert: cert}, 0)
	kubectlApply(t, cp, "-f", file)

	token := func(ns, sa string) (string, error) {
		tr, err := kplug.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return tr.Status.Token, nil
	}
	var tok string
	poll.Until(t, "the RoleBinding to take effect", func() bool {
		tok, err = token(ns, named[0])
		return err == nil
	})
	// The power the file states: that account's token, for the API server.
	review, err := clientFor(t, cp, &framework.User{Name: "token", Token: tok}, 0).AuthenticationV1().SelfSubjectReviews().
		Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if want := "system:serviceaccount:" + ns + ":" + named[0]; err != nil || review.Status.UserInfo.Username != want {
		t.Errorf("the token requested is %+v, %v; want %s", review, err, want)
	}
	// And no other account's, here or in another namespace.
	for _, c := range []struct{ ns, sa string }{{ns, "deployer"}, {ns, "default"}, {other, named[0]}} {
		if _, err := token(c.ns, c.sa); !apierrors.IsForbidden(err) {
			t.Errorf("a token of %s/%s: %v, want forbidden", c.ns, c.sa, err)
		}
	}
	if _, err := kplug.CoreV1().ServiceAccounts(ns).Get(ctx, "deployer", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("reading the service account %s/deployer: %v, want forbidden", ns, err)
	}
	if _, err := kplug.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing secrets of %s: %v, want forbidden", ns, err)
	}
}
