package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fixture copies testdata/example, a module with a public package (a, with a function
// only windows has), an internal one a exposes a type of, and a command, into a directory
// of the test's own.
func fixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "example"))); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// step runs apicheck (-write when write is set) and checks what it says and its error.
func step(t *testing.T, dir string, write bool, wantOut, wantErr string) {
	t.Helper()
	var out strings.Builder
	err := run(t.Context(), options{dir: dir, record: "api/example.txt", changelog: "CHANGELOG.md", write: write}, &out)
	gotErr := ""
	if err != nil {
		gotErr = err.Error()
	}
	if diff := cmp.Diff(wantErr, gotErr); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantOut, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// TestRun walks a module through the life of its record: written, kept, a compatible
// addition (which needs the record updated), an incompatible change before any release,
// and one after a release, which needs a changelog entry before the record takes it.
func TestRun(t *testing.T) {
	t.Parallel()
	dir := fixture(t)

	step(t, dir, false, "", "api/example.txt is missing: make api-record writes it from the code")
	step(t, dir, true, "apicheck: wrote api/example.txt (7 lines): review its diff, and commit it with the change\n", "")
	record, err := os.ReadFile(filepath.Join(dir, "api", "example.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := recordHeader + `pkg a (windows), func OnlyOnWindows()
pkg a, func Greet(string) string
pkg a, func NewCounter() *internal/b.Counter
pkg internal/b, method (*Counter) Add()
pkg internal/b, type Counter struct
pkg internal/b, type Counter struct, N int
pkg internal/b, type Counter struct, comparable
`
	if diff := cmp.Diff(want, string(record)); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	step(t, dir, false, "apicheck: the public API matches api/example.txt\n", "")
	step(t, dir, true, "apicheck: api/example.txt is up to date\n", "")

	// A compatible addition fails the check until it is recorded.
	writeFile(t, dir, "a/wave.go", "package a\n\n// Wave waves.\nfunc Wave() {}\n")
	step(t, dir, false, `apicheck: the public API differs from api/example.txt:
compatible: added, or changed without breaking any use:
  + pkg a, func Wave()
`, "the public API has additions that api/example.txt lacks: record them with make api-record and commit the record with them")
	step(t, dir, true, `apicheck: the public API differs from api/example.txt:
compatible: added, or changed without breaking any use:
  + pkg a, func Wave()
apicheck: wrote api/example.txt (8 lines): review its diff, and commit it with the change
`, "")
	step(t, dir, false, "apicheck: the public API matches api/example.txt\n", "")

	// An incompatible change (a changed signature, a changed field of the exposed internal
	// type), before any release: no changelog entry is needed.
	writeFile(t, dir, "a/wave.go", "package a\n\n// Wave waves.\nfunc Wave(times int) {}\n")
	writeFile(t, dir, "internal/b/b.go", "package b\n\ntype Counter struct{ N int64 }\n\nfunc (c *Counter) Add() { c.N++ }\n")
	changes := `apicheck: the public API differs from api/example.txt:
incompatible: removed or changed, so code that uses them may no longer compile:
  - pkg a, func Wave()
  - pkg internal/b, type Counter struct, N int
compatible: added, or changed without breaking any use:
  + pkg a, func Wave(int)
  + pkg internal/b, type Counter struct, N int64
`
	step(t, dir, false, changes, "the public API changed incompatibly (a.Wave, internal/b.Counter); CHANGELOG.md names no release yet, so no entry is needed there: record the change deliberately with make api-record and commit the record with it")

	// After a release, the changelog's top section must name what changed.
	writeFile(t, dir, "CHANGELOG.md", "# Changelog\n\n## Unreleased\n\n- `a.Wave` takes how many times to wave.\n\n## v0.1.0\n\n- First release.\n")
	step(t, dir, false, changes, "the public API changed incompatibly (a.Wave, internal/b.Counter), which breaks code written for the last release: name each of them in an entry of the top section of CHANGELOG.md (## Unreleased), then record the change deliberately with make api-record and commit the record with it")
	step(t, dir, true, changes, "not writing api/example.txt: the change is incompatible, and the top section of CHANGELOG.md (## Unreleased) does not name internal/b.Counter: add an entry that does, then run make api-record again")
	writeFile(t, dir, "CHANGELOG.md", "# Changelog\n\n## Unreleased\n\n- `a.Wave` takes how many times to wave.\n- `b.Counter` counts in int64.\n\n## v0.1.0\n\n- First release.\n")
	step(t, dir, true, changes+"apicheck: wrote api/example.txt (8 lines): review its diff, and commit it with the change\n", "")
	step(t, dir, false, "apicheck: the public API matches api/example.txt\n", "")
}
