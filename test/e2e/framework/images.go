package framework

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// BuildTestImageProgram builds test/e2e/testimage, static, into dir and returns its path:
// the program of the node tests' images (StaticImage), so that nothing is pulled from
// outside.
func BuildTestImageProgram(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "testimage")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./test/e2e/testimage")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building test/e2e/testimage: %w: %s", err, b)
	}
	return out, nil
}

// StaticImage is a one-layer image for this machine's architecture holding the static
// program at binary as /NAME (its base name), run as `/NAME args...`.
func StaticImage(binary string, args ...string) (ggcrv1.Image, error) {
	b, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(binary)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(b); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = []string{"/" + name}
	cfg.Config.Cmd = args
	return mutate.ConfigFile(img, cfg)
}
