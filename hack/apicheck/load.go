package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/importer"
	"go/token"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// A buildContext is one configuration the API is read in: build constraints can give a
// package another API on another operating system or without cgo.
type buildContext struct {
	name, goos, goarch, cgo string
}

// contexts are the configurations the record covers: those make lint vets, with cgo on
// linux (make deps installs gcc) and off elsewhere, as cross-compiling leaves it.
var contexts = []buildContext{
	{name: "linux", goos: "linux", goarch: "amd64", cgo: "1"},
	{name: "darwin", goos: "darwin", goarch: "amd64", cgo: "0"},
	{name: "windows", goos: "windows", goarch: "amd64", cgo: "0"},
}

// loadAPI reads the API of the module at dir in every context.
func loadAPI(ctx context.Context, dir string) (api, error) {
	out, err := goCmd(ctx, dir, nil, "list", "-m", "-f", "{{.Path}}")
	if err != nil {
		return nil, err
	}
	module := strings.TrimSpace(string(out))
	// The contexts are read side by side: the go command mostly waits on the build cache.
	features := make([]map[feature]bool, len(contexts))
	errs := make([]error, len(contexts))
	var wg sync.WaitGroup
	for i, bc := range contexts {
		wg.Go(func() { features[i], errs[i] = loadContext(ctx, dir, module, bc) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	a := api{}
	for i := range contexts {
		for f := range features[i] {
			a[f] |= 1 << i
		}
	}
	return a, nil
}

// loadContext reads the API of the module's public packages in one context, from the
// export data the go command compiles for them: the API as an importer sees it.
func loadContext(ctx context.Context, dir, module string, bc buildContext) (map[feature]bool, error) {
	env := []string{"GOOS=" + bc.goos, "GOARCH=" + bc.goarch, "CGO_ENABLED=" + bc.cgo}
	out, err := goCmd(ctx, dir, env, "list", "-e", "-f", "{{.ImportPath}} {{.Name}}", "./...")
	if err != nil {
		return nil, err
	}
	var pkgs []string
	for line := range strings.Lines(string(out)) {
		path, name, _ := strings.Cut(strings.TrimSpace(line), " ")
		if name != "" && name != "main" && isPublic(module, path) {
			pkgs = append(pkgs, path)
		}
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("no public packages in %s for %s", module, bc.name)
	}
	out, err = goCmd(ctx, dir, env, append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, pkgs...)...)
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	for line := range strings.Lines(string(out)) {
		path, file, _ := strings.Cut(strings.TrimSpace(line), "\t")
		exports[path] = file
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file := exports[path]
		if file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	p := newPrinter(module, pkgs)
	for _, path := range pkgs {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, fmt.Errorf("reading the API of %s for %s: %w", path, bc.name, err)
		}
		p.packageFeatures(pkg)
	}
	return p.out, nil
}

// isPublic says whether other modules may import the package at path: not internal, and not
// under the module's cmd/, test/ or hack/.
func isPublic(module, path string) bool {
	rel, ok := strings.CutPrefix(path, module)
	if !ok || (rel != "" && rel[0] != '/') {
		return false
	}
	rel = strings.TrimPrefix(rel, "/")
	for i, elem := range strings.Split(rel, "/") {
		if elem == "internal" || (i == 0 && (elem == "cmd" || elem == "test" || elem == "hack")) {
			return false
		}
	}
	return true
}

// goCmd runs the go command in dir, outside any go.work and with the module's own
// requirements, so that the API read is the checkout's.
func goCmd(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly"), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s go %s: %w\n%s", strings.Join(env, " "), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
