//go:build unix

package proxyplugin

import (
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSmallDaemonBeside: kplug starts the program beside it only when it is its own
// kplug-proxy-plugin (same build, same version) and no other user could have put it there
// or replaced it; every other case is refused with the reason, and kplug serves itself.
func TestSmallDaemonBeside(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The daemon program as make build builds it, and kplug's build information: the
	// same as the daemon's, as when both come from one make build.
	bin := t.TempDir()
	daemon := goBuild(t, filepath.Join(bin, DaemonProgram))
	ours, err := buildinfo.ReadFile(daemon)
	if err != nil {
		t.Fatal(err)
	}
	check := func(kplug string) (string, error) { return smallDaemonBeside(t.Context(), kplug, ours, "devel") }
	// install copies this test binary as kplug and, as the daemon, src with mode, into a
	// new directory, and returns kplug's path.
	install := func(t *testing.T, src string, mode os.FileMode) string {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "top", "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		kplug := filepath.Join(dir, "kplug")
		copyFile(t, self, kplug, 0o755)
		if src != "" {
			copyFile(t, src, filepath.Join(dir, DaemonProgram), mode)
		}
		return kplug
	}
	for _, dirMode := range []os.FileMode{0o755, 0o777 | os.ModeSticky} {
		t.Run(fmt.Sprintf("the same build, installed like kplug, in a directory %v", dirMode), func(t *testing.T) {
			kplug := install(t, daemon, 0o755)
			if err := os.Chmod(filepath.Dir(kplug), dirMode); err != nil {
				t.Fatal(err)
			}
			got, err := check(kplug)
			if want := filepath.Join(filepath.Dir(kplug), DaemonProgram); err != nil || got != want {
				t.Errorf("smallDaemonBeside = %q, %v; want %q", got, err, want)
			}
		})
	}
	notGo := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Another version of the daemon: built alike, stamped as make release stamps, which
	// -trimpath keeps out of the build information (issue 33 review, F1).
	otherVersion := goBuild(t, filepath.Join(t.TempDir(), DaemonProgram), "-ldflags", "-X github.com/kplug/kplug/internal/version.Version=v9.9.9")
	for _, tt := range []struct {
		name          string
		src           string
		dirMode, mode os.FileMode
		prepare       func(t *testing.T, daemon string)
		wantErr       string
	}{
		{name: "not installed", wantErr: "no such file"},
		{name: "another version", src: otherVersion, dirMode: 0o755, mode: 0o755, wantErr: `--version said "kplug-proxy-plugin v9.9.9\n", want "kplug-proxy-plugin devel\n"`},
		{name: "another program of the module", src: self, dirMode: 0o755, mode: 0o755, wantErr: "not the kplug-proxy-plugin of this kplug"},
		{name: "another Go program", src: goTool(t, "gofmt"), dirMode: 0o755, mode: 0o755, wantErr: "not the kplug-proxy-plugin of this kplug (another toolchain, module or build settings)"},
		{name: "not a Go program", src: notGo, dirMode: 0o755, mode: 0o755, wantErr: "not the kplug-proxy-plugin of this kplug"},
		{name: "writable by others", src: daemon, dirMode: 0o755, mode: 0o775, wantErr: "writable by other users (mode -rwxrwxr-x)"},
		{name: "directory writable by others", src: daemon, dirMode: 0o777, mode: 0o755, wantErr: "writable by other users (mode -rwxrwxrwx), so what is in it could be replaced"},
		{name: "another owner", src: daemon, dirMode: 0o755, mode: 0o755, prepare: func(t *testing.T, daemon string) {
			if os.Geteuid() != 0 {
				t.Skip("changing a file's owner needs root")
			}
			if err := os.Chown(daemon, 12345, -1); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "is owned by uid 12345"},
		{name: "a parent directory writable by others", src: daemon, dirMode: 0o755, mode: 0o755, prepare: func(t *testing.T, daemon string) {
			if err := os.Chmod(filepath.Dir(filepath.Dir(daemon)), 0o777); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "top is writable by other users (mode -rwxrwxrwx), so what is in it could be replaced"},
		{name: "a parent directory of another owner", src: daemon, dirMode: 0o755, mode: 0o755, prepare: func(t *testing.T, daemon string) {
			if os.Geteuid() != 0 {
				t.Skip("changing a directory's owner needs root")
			}
			if err := os.Chown(filepath.Dir(filepath.Dir(daemon)), 12345, -1); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "top is owned by uid 12345, neither root nor uid "},
		{name: "a link", dirMode: 0o755, prepare: func(t *testing.T, link string) {
			if err := os.Symlink(daemon, link); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "is not a regular file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kplug := install(t, tt.src, tt.mode)
			if tt.prepare != nil {
				tt.prepare(t, filepath.Join(filepath.Dir(kplug), DaemonProgram))
			}
			if err := os.Chmod(filepath.Dir(kplug), tt.dirMode); err != nil {
				t.Fatal(err)
			}
			got, err := check(kplug)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("smallDaemonBeside = %q, %v; want an error with %q", got, err, tt.wantErr)
			}
		})
	}
}

// goBuild builds cmd/kplug-proxy-plugin as out, with more go build flags.
func goBuild(t *testing.T, out string, flags ...string) string {
	t.Helper()
	args := append(append([]string{"build", "-trimpath", "-o", out}, flags...), "github.com/kplug/kplug/cmd/kplug-proxy-plugin")
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// goTool is the path of a program of the Go toolchain that runs the tests.
func goTool(t *testing.T, name string) string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "bin", name)
}
