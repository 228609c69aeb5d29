package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNothingHeavy keeps kplug-exec-cache, and the packages plugins are written with,
// light: Go initialises every package a binary links, and these cost every warm hit (and
// every run of an SDK plugin) several milliseconds (docs/benchmarks.md).
func TestLinksNothingHeavy(t *testing.T) {
	t.Parallel()
	// Module paths and everything under them, and single packages.
	trees := []string{"k8s.io/client-go", "k8s.io/apimachinery", "k8s.io/api", "k8s.io/klog",
		"github.com/prometheus", "github.com/spf13/cobra", "google.golang.org/protobuf"}
	packages := []string{"github.com/kplug/kplug/execcred"}
	for _, light := range []string{".", "github.com/kplug/kplug/execcred/plugin", "github.com/kplug/kplug/execcred/wire"} {
		out, err := exec.Command("go", "list", "-deps", light).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", light, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, tree := range trees {
				if dep == tree || strings.HasPrefix(dep, tree+"/") {
					t.Errorf("%s links %s", light, dep)
				}
			}
			for _, p := range packages {
				if dep == p {
					t.Errorf("%s links %s", light, dep)
				}
			}
		}
	}
}
