package version

import (
	"os"
	"regexp"
	"testing"
)

// The versions we claim to be tested against must be the ones `make tools` builds.
func TestKubernetesMatchesPinnedTools(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]string{
		"../../hack/tools/go.mod":          Kubernetes,
		"../../hack/tools/previous/go.mod": KubernetesPrevious,
	} {
		mod, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v\S+)`).FindSubmatch(mod)
		if m == nil {
			t.Fatalf("%s does not require k8s.io/kubernetes", file)
		}
		if string(m[1]) != want {
			t.Errorf("%s pins k8s.io/kubernetes %s, internal/version says %s", file, m[1], want)
		}
	}
}

func TestGetFallsBackToDevel(t *testing.T) {
	t.Parallel()
	info := Get()
	if info.Kplug == "" || info.Go == "" || info.Kubernetes != Kubernetes {
		t.Errorf("Get() = %+v", info)
	}
}
