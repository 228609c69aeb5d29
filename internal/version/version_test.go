package version

import (
	"os"
	"regexp"
	"runtime/debug"
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

func TestKplugVersion(t *testing.T) {
	t.Parallel()
	installed := func(v string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{Main: debug.Module{Path: "github.com/kplug/kplug", Version: v}}, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	tests := []struct {
		name, stamped string
		buildInfo     func() (*debug.BuildInfo, bool)
		want          string
	}{
		{"make release stamps the version", "v1.2.3", installed("v1.2.2"), "v1.2.3"},
		{"go install module@version records it", "", installed("v1.2.3"), "v1.2.3"},
		{"go install of a pseudo-version", "", installed("v0.0.0-20261124140000-0123456789ab"), "v0.0.0-20261124140000-0123456789ab"},
		{"go build in a checkout", "", installed("(devel)"), "devel"},
		{"no build information", "", none, "devel"},
	}
	for _, tt := range tests {
		if got := kplug(tt.stamped, tt.buildInfo); got != tt.want {
			t.Errorf("%s: kplug(%q) = %q, want %q", tt.name, tt.stamped, got, tt.want)
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
