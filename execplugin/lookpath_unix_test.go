//go:build !windows

package execplugin

import (
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
)

// LookPath searches the PATH of the environment it is given, never the process's, and
// reports what a relative PATH entry finds with exec.ErrDot, as exec.LookPath does.
func TestLookPathInEnviron(t *testing.T) {
	dir := t.TempDir()
	mustSymlink(t, "/bin/true", filepath.Join(dir, "client", "plug"))
	mustSymlink(t, "/bin/true", filepath.Join(dir, "planted", "plug"))
	t.Setenv("PATH", filepath.Join(dir, "planted"))
	t.Chdir(dir)

	tests := []struct {
		name     string
		file     string
		environ  []string
		want     string
		wantErr  error
		wantPath string // returned beside ErrDot
	}{
		{"the environ's PATH, not the process's", "plug", []string{"PATH=" + filepath.Join(dir, "client")}, filepath.Join(dir, "client", "plug"), nil, ""},
		{"the last PATH wins", "plug", []string{"PATH=/nonexistent", "PATH=" + filepath.Join(dir, "client")}, filepath.Join(dir, "client", "plug"), nil, ""},
		{"no PATH", "plug", []string{"HOME=/"}, "", exec.ErrNotFound, ""},
		{"not found", "nosuch", []string{"PATH=" + filepath.Join(dir, "client")}, "", exec.ErrNotFound, ""},
		{"relative entry", "plug", []string{"PATH=client"}, "", exec.ErrDot, "client/plug"},
		{"empty entry: the working directory, which has no plug", "plug", []string{"PATH=:/nonexistent"}, "", exec.ErrNotFound, ""},
		{"a path is not searched for", filepath.Join(dir, "client", "plug"), nil, filepath.Join(dir, "client", "plug"), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LookPath(tt.file, tt.environ)
			if tt.wantErr == nil {
				if err != nil || got != tt.want {
					t.Fatalf("LookPath(%q) = %q, %v; want %q", tt.file, got, err, tt.want)
				}
				return
			}
			var execErr *exec.Error
			if !errors.Is(err, tt.wantErr) || !errors.As(err, &execErr) || got != tt.wantPath {
				t.Fatalf("LookPath(%q) = %q, %v; want %q and %v", tt.file, got, err, tt.wantPath, tt.wantErr)
			}
		})
	}
}

// TestNotFoundThroughRelativePATHEntry: a plugin found only through a relative PATH entry
// such as bin is named where it is, not said to be in the current directory (issue 27, N1).
func TestNotFoundThroughRelativePATHEntry(t *testing.T) {
	dir := t.TempDir()
	mustSymlink(t, "/bin/true", filepath.Join(dir, "bin", "hx-plugin"))
	t.Chdir(dir)
	_, err := ResolveIn("hx-plugin", "", []string{"PATH=bin"})
	want := `plugin "hx-plugin" not found: it is only in bin/hx-plugin, through a relative PATH entry, which is not searched; give its path, e.g. ./bin/hx-plugin`
	var nf *NotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, exec.ErrDot) || err.Error() != want {
		t.Fatalf("ResolveIn: %v\nwant %s", err, want)
	}
}
