package version

import (
	"os"
	"regexp"
	"testing"
)

// The version we claim to be tested against must be the one `make tools` builds.
func TestKubernetesMatchesPinnedTools(t *testing.T) {
	t.Parallel()
	mod, err := os.ReadFile("../../hack/tools/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("hack/tools/go.mod does not require k8s.io/kubernetes")
	}
	if string(m[1]) != Kubernetes {
		t.Errorf("hack/tools pins k8s.io/kubernetes %s, version.Kubernetes says %s", m[1], Kubernetes)
	}
}

func TestGetFallsBackToDevel(t *testing.T) {
	t.Parallel()
	info := Get()
	if info.Kplug == "" || info.Go == "" || info.Kubernetes != Kubernetes {
		t.Errorf("Get() = %+v", info)
	}
}
