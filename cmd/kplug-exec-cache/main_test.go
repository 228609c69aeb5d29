package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksOnlyTheCache keeps kplug-exec-cache light: Go initialises every package a
// binary links, and these cost a warm hit several milliseconds (docs/benchmarks.md).
func TestLinksOnlyTheCache(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	// Module paths and everything under them, and single packages.
	trees := []string{"k8s.io/client-go", "k8s.io/apimachinery", "k8s.io/api", "k8s.io/klog",
		"github.com/prometheus", "github.com/spf13/cobra", "google.golang.org/protobuf"}
	packages := []string{"github.com/kplug/kplug/execcred", "github.com/kplug/kplug/execcred/plugin"}
	for _, dep := range strings.Fields(string(out)) {
		for _, tree := range trees {
			if dep == tree || strings.HasPrefix(dep, tree+"/") {
				t.Errorf("kplug-exec-cache links %s", dep)
			}
		}
		for _, p := range packages {
			if dep == p {
				t.Errorf("kplug-exec-cache links %s", dep)
			}
		}
	}
}
