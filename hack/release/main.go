// Command release builds what `make release` publishes, reproducibly: kplug and
// kplug-exec-cache for every platform (CGO_ENABLED=0, -trimpath, the version stamped), one
// archive per platform laid out as krew and package managers expect, an SBOM per archive
// (CycloneDX, made by syft), SHA256SUMS, the krew manifest, and an OCI image (linux/amd64
// and linux/arm64, FROM scratch, non-root) with its SBOMs attached as OCI referrers, as an
// OCI image layout. Everything in the output is a function of the commit: two runs from
// the same commit, on any path, give byte-identical files. The binaries are built by the
// toolchain go.mod's toolchain line pins, in an environment made here rather than
// inherited (toolchain.go), and their SBOMs record that toolchain and those settings.
//
//	go run ./hack/release --version v1.2.3 --syft _output/bin/syft --out _output/release
//	go run ./hack/release push --layout _output/release/image registry.example/kplug:v1.2.3
//
// With --archives-only it stops after the archives and SHA256SUMS, for any subset of
// platforms and without syft: the end-to-end tests take the binary they run from such an
// archive, so that they test the very binary a release ships.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	var usage usageError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

type usageError struct{ error }

func run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "push" {
		return runPush(ctx, args[1:])
	}
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	o := options{environ: os.Environ()}
	fs.StringVar(&o.out, "out", "_output/release", "directory to write the release into (replaced)")
	fs.StringVar(&o.version, "version", "", "the version to stamp, as hack/version.sh prints it (required)")
	fs.StringVar(&o.syft, "syft", "", "path of the pinned syft that makes the SBOMs (required)")
	fs.StringVar(&o.source, "source", ".", "the kplug checkout to build")
	platforms := fs.String("platforms", strings.Join(defaultPlatforms, ","), "GOOS/GOARCH pairs to build, comma-separated")
	fs.BoolVar(&o.archivesOnly, "archives-only", false, "write only the archives and SHA256SUMS (no SBOMs, krew manifest, image or module proxy; --syft not needed), e.g. for tests that run a release's binary")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	var err error
	if o.platforms, err = parsePlatforms(*platforms); err != nil {
		return usageError{err}
	}
	if o.version == "" || o.syft == "" && !o.archivesOnly {
		return usageError{errors.New("--version and --syft are required (make release passes them)")}
	}
	return build(ctx, o)
}

func runPush(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("release push", flag.ContinueOnError)
	layoutDir := fs.String("layout", "_output/release/image", "the OCI image layout make release wrote")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("want one image reference to push to, e.g. registry.example/kplug:v1.2.3")}
	}
	digest, err := push(ctx, *layoutDir, fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}
