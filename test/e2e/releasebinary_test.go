package e2e

import (
	"archive/tar"
	"compress/gzip"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// releaseKplug is the kplug that the release archive for this machine's platform holds,
// built once per run of the tests: hack/release --archives-only builds and packs it as
// `make release` does (same build, same archive; no SBOMs, krew manifest or image, which
// do not change the binary), and the binary is taken out of the archive.
var releaseKplug = sync.OnceValues(buildReleaseKplug)

// releaseKplugForTest returns the release archive's kplug, checked to be built without cgo.
func releaseKplugForTest(t *testing.T) string {
	t.Helper()
	b, err := releaseKplug()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the release archive's kplug %s, built in %v (once per run)", b.version, b.took)
	return b.path
}

type releaseBinary struct {
	path, version string
	took          time.Duration
}

func buildReleaseKplug() (b releaseBinary, err error) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	if !slices.Contains(releasePlatforms, platform) {
		return b, fmt.Errorf("make release builds no archive for %s", platform)
	}
	dir, err := sharedDir()
	if err != nil {
		return b, err
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return b, err
	}
	v, err := exec.Command(filepath.Join(root, "hack", "version.sh")).Output()
	if err != nil {
		return b, fmt.Errorf("hack/version.sh: %w", err)
	}
	rel := releaseBuild{dir: filepath.Join(dir, "release"), version: strings.TrimSpace(string(v))}
	start := time.Now()
	cmd := exec.Command("go", "run", "./hack/release", "--archives-only", "--platforms", platform, "--version", rel.version, "--out", rel.dir)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return b, fmt.Errorf("go run ./hack/release --archives-only --platforms %s: %w\n%s", platform, err, out)
	}
	path := filepath.Join(dir, "kplug")
	if err := extractFile(filepath.Join(rel.dir, rel.archive(platform)), "kplug", path); err != nil {
		return b, err
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return b, err
	}
	cgo := "unset"
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" {
			cgo = s.Value
		}
	}
	if cgo != "0" {
		return b, fmt.Errorf("the release archive's kplug records CGO_ENABLED %s, want 0", cgo)
	}
	return releaseBinary{path: path, version: rel.version, took: time.Since(start).Round(time.Second)}, nil
}

// extractFile writes the file name of the .tar.gz archive to path, executable.
func extractFile(archive, name, path string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", archive, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s holds no %s", archive, name)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", archive, err)
		}
		if h.Name != name {
			continue
		}
		out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		return errors.Join(err, out.Close())
	}
}
