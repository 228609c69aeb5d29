package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksOnlyTheProxy keeps the daemon small: it links the exec proxy and what signs
// and authenticates requests, none of kplug's other mechanisms, whose packages would be
// resident in every exec proxy daemon (docs/reliability.md).
func TestLinksOnlyTheProxy(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	heavy := []string{"k8s.io/client-go/kubernetes", "k8s.io/api", "k8s.io/apiserver", "k8s.io/component-base",
		"k8s.io/kubelet", "go.etcd.io", "google.golang.org/grpc", "github.com/google/cel-go", "github.com/spf13/cobra",
		"golang.org/x/crypto/x509roots", "github.com/kplug/kplug/internal/cli", "github.com/kplug/kplug/imagecred",
		"github.com/kplug/kplug/mvproxy", "github.com/kplug/kplug/httpsig/verifier", "github.com/distribution"}
	for _, dep := range strings.Fields(string(out)) {
		for _, tree := range heavy {
			if dep == tree || strings.HasPrefix(dep, tree+"/") {
				t.Errorf("kplug-proxy-plugin links %s", dep)
			}
		}
	}
}
