package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCommandLine pastes each printed command into bash and checks that bash gives back
// the arguments the demo ran, and the program by its path from the working directory.
func TestCommandLine(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{
		{filepath.Join(wd, "_output", "bin", "kubectl"), "--kubeconfig", "/tmp/kplug-1/exec.kubeconfig", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"},
		{"/usr/bin/env", "it's", "a b", "$HOME", "*", "", "--image=registry.example/hello", "-- x;y"},
	} {
		line := commandLine(argv)
		// printf stands for the program: bash expands the words as for any command.
		out, err := exec.Command("bash", "-c", `printf '%s\0' `+line).Output()
		if err != nil {
			t.Fatalf("bash -c %q: %v", line, err)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		want := append([]string{typed(argv[0])}, argv[1:]...)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("bash read %q as (-want +got):\n%s", line, diff)
		}
	}
	if got := typed(filepath.Join(wd, "_output", "bin", "kplug")); got != filepath.Join("_output", "bin", "kplug") {
		t.Errorf("typed(the clone's kplug) = %q, want _output/bin/kplug", got)
	}
	if got := typed("/usr/bin/env"); got != "/usr/bin/env" {
		t.Errorf("typed(/usr/bin/env) = %q", got)
	}
}
