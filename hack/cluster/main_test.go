package main

import (
	"os/exec"
	"testing"
)

// The export lines must paste as they are: a path with spaces or quotes comes back from
// the shell unchanged.
func TestShellQuote(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"/work/kplug/_output/bin", "/home/a b/kplug", "/tmp/it's", `/tmp/$HOME"x"`, ""} {
		out, err := exec.CommandContext(t.Context(), "sh", "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != s {
			t.Errorf("shellQuote(%q) = %s, which the shell reads as %q", s, shellQuote(s), out)
		}
	}
	if got := shellQuote("/work/kplug/_output/bin"); got != "/work/kplug/_output/bin" {
		t.Errorf("a plain path is quoted: %s", got)
	}
}
