package framework

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// BinDirEnv overrides where the control-plane binaries are looked for.
const BinDirEnv = "KPLUG_BIN_DIR"

// Binaries the framework runs, built by `make tools`.
var requiredBinaries = []string{"etcd", "kube-apiserver", "kubectl"}

// FindBinDir returns $KPLUG_BIN_DIR, or _output/bin at the root of the module the working
// directory is in, after checking that it holds etcd, kube-apiserver and kubectl.
func FindBinDir() (string, error) {
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "_output", "bin")
	}
	for _, b := range requiredBinaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s is missing from %s: run `make tools` to build the pinned control plane (or set %s)", b, dir, BinDirEnv)
		}
	}
	return dir, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			// hack/tools has a go.mod of its own; the kplug module root also has cmd/kplug.
			if _, err := os.Stat(filepath.Join(dir, "cmd", "kplug")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the kplug module root above the working directory")
		}
		dir = parent
	}
}

// FindTool returns the path of name (a pinned tool or plugin that `make tools` builds, such
// as aws-iam-authenticator) in the directory FindBinDir returns.
func FindTool(name string) (string, error) {
	dir, err := FindBinDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s is missing from %s: run `make tools` to build the pinned plugins (or set %s)", name, dir, BinDirEnv)
	}
	return path, nil
}
