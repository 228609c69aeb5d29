package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/test/e2e/framework"
)

// The getting-started pages and the README quickstart are run by the tests as a reader
// would run them: every ```sh block of a page, in order, in one bash session (set -eu,
// pipefail), and every fenced block whose preceding line ends in "`NAME`:" saved as NAME
// (in the session's working directory) where the page shows it. A block that cannot run here (it needs kubeadm, a real node, the network)
// is preceded by
//
//	<!-- not run by the tests: REASON -->
//
// and the test does its part itself. What differs between a reader's machine and the
// test's (paths, addresses) is replaced by a table in the test, and each replacement must
// match, so that the page and its test cannot drift apart.
const notRunMarker = "<!-- not run by the tests:"

// docPage is what a page asks a reader to run and write.
type docPage struct {
	path    string
	parts   []string // the ```sh blocks, and the files to save, in page order, as bash
	skipped []string // reasons of the blocks not run
}

func (p docPage) script() string { return strings.Join(p.parts, "") }

// splitAt cuts the page before the first block that contains s, for a test that must
// do its part (start a sidecar, say) between the page's steps.
func (p docPage) splitAt(t *testing.T, s string) (before, after docPage) {
	t.Helper()
	for i, part := range p.parts {
		if strings.Contains(part, s) {
			return docPage{path: p.path, parts: p.parts[:i], skipped: p.skipped}, docPage{path: p.path, parts: p.parts[i:]}
		}
	}
	t.Fatalf("%s has no block with %q", p.path, s)
	return
}

// heredoc ends the here-document that saves a page's file in the script.
const heredoc = "KPLUG_DOC_FILE_END"

// readDocPage parses the markdown page at path, relative to the module root.
func readDocPage(t *testing.T, path string) docPage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), path))
	if err != nil {
		t.Fatal(err)
	}
	return parseDocPage(t, path, strings.Split(string(data), "\n"))
}

// readDocSection is readDocPage for one section of the page: from the line heading to
// the next heading of the same level.
func readDocSection(t *testing.T, path, heading string) docPage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), path))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	level := headingLevel(heading)
	for i, l := range lines {
		if l != heading {
			continue
		}
		end := len(lines)
		fenced := false
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], "```") {
				fenced = !fenced
			}
			if n := headingLevel(lines[j]); !fenced && n > 0 && n <= level {
				end = j
				break
			}
		}
		return parseDocPage(t, path+" ("+heading+")", lines[i+1:end])
	}
	t.Fatalf("%s has no line %q", path, heading)
	return docPage{}
}

// headingLevel is the level of a markdown heading line ("## x" is 2), or 0.
func headingLevel(line string) int {
	n := len(line) - len(strings.TrimLeft(line, "#"))
	if n == 0 || !strings.HasPrefix(line[n:], " ") {
		return 0
	}
	return n
}

func parseDocPage(t *testing.T, path string, lines []string) docPage {
	t.Helper()
	page := docPage{path: path}
	var prev, lang string
	var block *strings.Builder
	var skip bool
	var file string
	for _, line := range lines {
		switch {
		case block == nil && strings.HasPrefix(line, "```") && len(line) > 3:
			lang = strings.Fields(line[3:])[0]
			block = &strings.Builder{}
			skip = strings.HasPrefix(strings.TrimSpace(prev), notRunMarker)
			if skip {
				page.skipped = append(page.skipped, strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(prev), notRunMarker)), "-->"))
			}
			file = ""
			if p := strings.TrimSpace(prev); strings.HasSuffix(p, "`:") {
				if i := strings.LastIndex(p[:len(p)-2], "`"); i >= 0 {
					file = p[i+1 : len(p)-2]
				}
			}
		case block != nil && strings.HasPrefix(line, "```"):
			switch {
			case skip:
			case file != "":
				if strings.Contains(block.String(), heredoc) {
					t.Fatalf("%s: the block for %s contains %s", path, file, heredoc)
				}
				page.parts = append(page.parts, fmt.Sprintf("# --- %s, block %d\nmkdir -p \"$(dirname %q)\"\ncat > %q <<'%s'\n%s%s\n",
					path, len(page.parts)+1, file, file, heredoc, block.String(), heredoc))
			case lang == "sh" || lang == "bash":
				page.parts = append(page.parts, fmt.Sprintf("# --- %s, block %d\n%s", path, len(page.parts)+1, block.String()))
			}
			block = nil
		case block != nil:
			block.WriteString(line + "\n")
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	if block != nil {
		t.Fatalf("%s: a fenced block is not closed", path)
	}
	return page
}

// run replaces each pair old, new (each old must occur in the page) and runs the page's
// script in dir with env (added to the environment), failing the test with the output if
// it fails. It returns the output.
func (p docPage) run(t *testing.T, dir string, env []string, replace ...string) string {
	t.Helper()
	return p.runWithEnviron(t, dir, append(os.Environ(), env...), replace...)
}

// runAsReader is run with env as the whole environment, none of the test's: a reader's
// shell, for a page that must work with nothing but what it says (see readerEnv).
func (p docPage) runAsReader(t *testing.T, dir string, env []string, replace ...string) string {
	t.Helper()
	return p.runWithEnviron(t, dir, env, replace...)
}

func (p docPage) runWithEnviron(t *testing.T, dir string, environ []string, replace ...string) string {
	t.Helper()
	script := p.replaced(t, replace...)
	for _, reason := range p.skipped {
		t.Logf("%s: a block not run here: %s", p.path, reason)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail -x\n"+script)
	cmd.Dir = dir
	cmd.Env = environ
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("running %d blocks of %s: %v\n%s", len(p.parts), p.path, err, out)
	}
	t.Logf("%s: %d blocks ran in %v", p.path, len(p.parts), time.Since(start).Round(100*time.Millisecond))
	return string(out)
}

// replaced is the page's script with each pair old, new of replace applied; each old must
// occur in the page.
func (p docPage) replaced(t *testing.T, replace ...string) string {
	t.Helper()
	if len(replace)%2 != 0 {
		t.Fatal("replace wants pairs")
	}
	script := p.script()
	for i := 0; i < len(replace); i += 2 {
		if !strings.Contains(script, replace[i]) {
			t.Fatalf("%s no longer contains %q: update the page's test", p.path, replace[i])
		}
	}
	return strings.NewReplacer(replace...).Replace(script)
}

// only keeps the pairs old, new of replace whose old occurs in the page: one table for a
// whole page (checked against it with replaced) serves each part of it that splitAt cut.
func (p docPage) only(replace ...string) []string {
	var out []string
	for i := 0; i+1 < len(replace); i += 2 {
		if strings.Contains(p.script(), replace[i]) {
			out = append(out, replace[i], replace[i+1])
		}
	}
	return out
}

// start runs the page's script in the background in dir with env (added to the
// environment), as a reader runs a server in a terminal of its own, beside the control
// plane (which stops it, before the apiservers); replace is as for run. The caller waits
// for whatever says it is ready.
func (p docPage) start(t *testing.T, cp *framework.ControlPlane, name, dir string, env []string, replace ...string) *framework.Process {
	t.Helper()
	script := fmt.Sprintf("cd %q\nset -euo pipefail -x\n%s", dir, p.replaced(t, replace...))
	proc, err := cp.StartProcess(name, []string{"bash", "-c", script}, append(os.Environ(), env...))
	if err != nil {
		t.Fatalf("%s: %v", p.path, err)
	}
	t.Cleanup(func() {
		proc.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("===== %s =====\n%s", name, proc.Tail(100))
		}
	})
	return proc
}

// pathWith is a PATH with dirs first.
func pathWith(dirs ...string) string {
	return "PATH=" + strings.Join(append(dirs, os.Getenv("PATH")), string(os.PathListSeparator))
}
