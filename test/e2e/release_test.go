package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kplug/kplug/test/e2e/framework"
)

// releaseCheckEnv turns TestRelease on.
const releaseCheckEnv = "KPLUG_RELEASE_CHECK"

// releaseBuild is `make release` run in a clone of HEAD.
type releaseBuild struct {
	clone   string // the clone's work tree
	dir     string // its _output/release
	version string
}

// platforms of make release, and the archive names it gives them.
var releasePlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64", "windows/arm64"}

// makeRelease clones HEAD (what is committed: a release is built from a commit) to
// parent/kplug and runs `make release` there with env added to the environment.
func makeRelease(t *testing.T, parent string, env ...string) releaseBuild {
	t.Helper()
	clone := cloneHead(t, parent)
	version, err := exec.Command(filepath.Join(clone, "hack", "version.sh")).Output()
	if err != nil {
		t.Fatalf("hack/version.sh: %v", err)
	}
	cmd := exec.Command("make", "--no-print-directory", "release")
	cmd.Dir = clone
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release in %s: %v\n%s", clone, err, out)
	}
	t.Logf("make release in %s: %v", clone, time.Since(start).Round(time.Second))
	return releaseBuild{clone: clone, dir: filepath.Join(clone, "_output", "release"), version: strings.TrimSpace(string(version))}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func (r releaseBuild) archive(platform string) string {
	goos, goarch, _ := strings.Cut(platform, "/")
	ext := ".tar.gz"
	if goos == "windows" {
		ext = ".zip"
	}
	return fmt.Sprintf("kplug_%s_%s_%s%s", strings.TrimPrefix(r.version, "v"), goos, goarch, ext)
}

// TestRelease builds the release of HEAD as `make release` does, twice, and checks what it
// promises: byte-identical output from two clones on different paths (different time
// zone and umask too, and Go and syft settings in the environment), binaries built by
// the toolchain go.mod pins and SBOMs that say so, checksums that sha256sum accepts, archives laid out for krew and
// package managers with cgo-free, stamped, trimmed binaries, SBOMs that name what is
// linked, an image that a real registry takes and gives back, and a krew manifest that
// the real krew installs.
//
// It runs with `make release-check` (KPLUG_RELEASE_CHECK=1), not in `make test`: cold, it
// costs syft's build (about 11 minutes on 2 cores) and kplug's for five more platforms
// (about 7 minutes), which the CI budget does not have room for on every run.
func TestRelease(t *testing.T) {
	if os.Getenv(releaseCheckEnv) == "" {
		t.Skipf("skipping the release checks: make release-check runs them (%s=1); cold they build syft and kplug for 6 platforms", releaseCheckEnv)
	}
	framework.ToolForTest(t, "syft")
	if out, err := exec.Command("git", "-C", moduleRoot(t), "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(out) > 0 {
		t.Logf("the work tree has uncommitted changes; the release is built from HEAD without them")
	}
	first := makeRelease(t, t.TempDir())

	t.Run("two builds from the same commit are byte-identical", func(t *testing.T) {
		// Another path (longer, so that no offset matches by chance), time zone and umask.
		parent := filepath.Join(t.TempDir(), "a", "longer", "path", "for", "the", "second", "clone")
		if err := os.MkdirAll(parent, 0o700); err != nil {
			t.Fatal(err)
		}
		// And a builder's environment that changes what go builds, what syft reports and
		// which version is stamped when a release inherits it (issue 27, N6): hack/release
		// makes the environment of the go command and of syft rather than inheriting it,
		// and make takes VERSION from its command line only.
		second := makeRelease(t, parent, "TZ=Pacific/Kiritimati", "SOURCE_DATE_EPOCH=",
			"GOFIPS140=latest", "GOFLAGS=-tags=kplug_polluted", "GOEXPERIMENT=nogreenteagc", "GOAMD64=v2", "CGO_ENABLED=1",
			"SYFT_GOLANG_SEARCH_LOCAL_MOD_CACHE_LICENSES=true", "VERSION=v0.0.0-from-the-environment")
		if second.version != first.version {
			t.Fatalf("versions %s and %s", first.version, second.version)
		}
		a, b := treeDigests(t, first.dir), treeDigests(t, second.dir)
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("the two releases differ (-first +second):\n%s", diff)
		}
		if len(a) < 2*len(releasePlatforms)+3 {
			t.Errorf("the release holds %d files: %v", len(a), a)
		}
	})

	t.Run("SHA256SUMS", func(t *testing.T) {
		sums, err := os.ReadFile(filepath.Join(first.dir, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		var named []string
		for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
			_, file, _ := strings.Cut(line, "  ")
			named = append(named, file)
		}
		var want []string
		for _, p := range releasePlatforms {
			want = append(want, first.archive(p), first.archive(p)+".sbom.cdx.json")
		}
		want = append(want, "kplug.krew.yaml")
		slices.Sort(want)
		if diff := cmp.Diff(want, named); diff != "" {
			t.Errorf("files in SHA256SUMS (-want +got):\n%s", diff)
		}
		cmd := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
		cmd.Dir = first.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum --check: %v\n%s", err, out)
		}
	})

	t.Run("archives", func(t *testing.T) {
		for _, p := range releasePlatforms {
			checkArchive(t, first, p)
		}
	})

	t.Run("SBOMs", func(t *testing.T) {
		want := map[string]string{}
		for _, mod := range []string{"k8s.io/client-go", "github.com/spf13/cobra", "golang.org/x/crypto/x509roots/fallback"} {
			out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", mod).Output()
			if err != nil {
				t.Fatal(err)
			}
			want[mod] = strings.TrimSpace(string(out))
		}
		for _, p := range releasePlatforms {
			checkSBOM(t, filepath.Join(first.dir, first.archive(p)+".sbom.cdx.json"), first.version, want, pinnedToolchain(t, first.clone))
		}
	})

	t.Run("image", func(t *testing.T) { checkImage(t, first) })
	t.Run("krew", func(t *testing.T) { checkKrew(t, first) })
}

// treeDigests maps every file under dir to its SHA-256 (and mode, for executables).
func treeDigests(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		sum := sha256.Sum256(data)
		files[filepath.ToSlash(rel)] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// checkArchive opens a platform's archive: the files at the top, and binaries built for
// the platform without cgo, with -trimpath and the version stamped. The linux/amd64 one
// runs here and says its version.
func checkArchive(t *testing.T, r releaseBuild, platform string) {
	t.Helper()
	goos, goarch, _ := strings.Cut(platform, "/")
	exe := func(n string) string {
		if goos == "windows" {
			return n + ".exe"
		}
		return n
	}
	files, modes := readArchive(t, filepath.Join(r.dir, r.archive(platform)))
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"LICENSE", "README.md", exe("kplug"), exe("kplug-exec-cache"), exe("kplug-proxy-plugin")}
	slices.Sort(want)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("%s: files (-want +got):\n%s", platform, diff)
		return
	}
	license, _ := os.ReadFile(filepath.Join(r.clone, "LICENSE"))
	if !bytes.Equal(files["LICENSE"], license) || !bytes.Contains(license, []byte("Apache License")) {
		t.Errorf("%s: LICENSE is not the checkout's Apache licence", platform)
	}
	for _, prog := range []string{"kplug", "kplug-exec-cache", "kplug-proxy-plugin"} {
		if modes[exe(prog)]&0o111 == 0 {
			t.Errorf("%s: %s is not executable (%v)", platform, exe(prog), modes[exe(prog)])
		}
		path := filepath.Join(t.TempDir(), exe(prog))
		if err := os.WriteFile(path, files[exe(prog)], 0o700); err != nil {
			t.Fatal(err)
		}
		bi, err := buildinfo.ReadFile(path)
		if err != nil {
			t.Fatalf("%s %s: %v", platform, prog, err)
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		// (go does not record -ldflags with -trimpath: they may hold paths.)
		if settings["GOOS"] != goos || settings["GOARCH"] != goarch || settings["CGO_ENABLED"] != "0" ||
			settings["-trimpath"] != "true" || settings["-ldflags"] != "" || settings["GOFIPS140"] != "" || settings["-tags"] != "" {
			t.Errorf("%s %s: build settings %v", platform, prog, settings)
		}
		if want := pinnedToolchain(t, r.clone); bi.GoVersion != want {
			t.Errorf("%s %s: built by %s, want %s (go.mod's toolchain line)", platform, prog, bi.GoVersion, want)
		}
		if prog == "kplug" && !bytes.Contains(files[exe(prog)], []byte(r.version)) {
			t.Errorf("%s %s: the version %s is not stamped in", platform, prog, r.version)
		}
		if prog == "kplug" && platform == runtime.GOOS+"/"+runtime.GOARCH {
			out, err := exec.Command(path, "version", "-o", "json").Output()
			var info struct{ Kplug, Platform string }
			if err := errors.Join(err, json.Unmarshal(out, &info)); err != nil || info.Kplug != r.version || info.Platform != platform {
				t.Errorf("kplug version from the %s archive: %+v (%v), want %s", platform, info, err, r.version)
			}
		}
	}
}

// readArchive returns the files of a .tar.gz or .zip and their modes.
func readArchive(t *testing.T, path string) (map[string][]byte, map[string]fs.FileMode) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files, modes := map[string][]byte{}, map[string]fs.FileMode{}
	if strings.HasSuffix(path, ".zip") {
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range zr.File {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			files[f.Name], err = io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			modes[f.Name] = f.Mode()
		}
		return files, modes
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, modes
		}
		if err != nil {
			t.Fatal(err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
		modes[h.Name] = h.FileInfo().Mode()
	}
}

// pinnedToolchain is the toolchain line of the go.mod in dir.
func pinnedToolchain(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "toolchain "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s/go.mod has no toolchain line", dir)
	return ""
}

// checkSBOM reads a CycloneDX SBOM: about kplug at version, made by syft, listing the
// modules in want at the versions go.mod selects, and saying in its formulation that the
// toolchain goVersion built both programs.
func checkSBOM(t *testing.T, path, version string, want map[string]string, goVersion string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		BOMFormat    string `json:"bomFormat"`
		SerialNumber string `json:"serialNumber"`
		Metadata     struct {
			Timestamp string `json:"timestamp"`
			Tools     struct {
				Components []struct{ Name string } `json:"components"`
			} `json:"tools"`
			Component struct{ Name, Version string } `json:"component"`
		} `json:"metadata"`
		Components  []struct{ Name, Version, PURL string } `json:"components"`
		Formulation []struct {
			Components []struct{ Name, Version string } `json:"components"`
			Workflows  []struct {
				Steps []struct {
					Name     string `json:"name"`
					Commands []struct {
						Properties []struct{ Name, Value string } `json:"properties"`
					} `json:"commands"`
				} `json:"steps"`
			} `json:"workflows"`
		} `json:"formulation"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	built := map[string]string{}
	for _, f := range doc.Formulation {
		for _, c := range f.Components {
			built[c.Name] = c.Version
		}
		for _, w := range f.Workflows {
			for _, s := range w.Steps {
				for _, c := range s.Commands {
					for _, p := range c.Properties {
						if p.Name == "cdx:gomod:build:env:GOVERSION" {
							built[s.Name] = p.Value
						}
					}
				}
			}
		}
	}
	if diff := cmp.Diff(map[string]string{"go": goVersion, "kplug": goVersion, "kplug-exec-cache": goVersion, "kplug-proxy-plugin": goVersion}, built); diff != "" {
		t.Errorf("%s: the toolchain in the formulation (-want +got):\n%s", path, diff)
	}
	if doc.BOMFormat != "CycloneDX" || !strings.HasPrefix(doc.SerialNumber, "urn:uuid:") || doc.Metadata.Timestamp == "" {
		t.Errorf("%s: format %q, serial %q, timestamp %q", path, doc.BOMFormat, doc.SerialNumber, doc.Metadata.Timestamp)
	}
	if doc.Metadata.Component.Name != "kplug" || doc.Metadata.Component.Version != version {
		t.Errorf("%s: describes %+v, want kplug %s", path, doc.Metadata.Component, version)
	}
	if len(doc.Metadata.Tools.Components) == 0 || doc.Metadata.Tools.Components[0].Name != "syft" {
		t.Errorf("%s: tools %+v, want syft", path, doc.Metadata.Tools.Components)
	}
	found := map[string]string{}
	for _, c := range doc.Components {
		found[c.Name] = c.Version
		if _, ok := want[c.Name]; ok && c.PURL != "pkg:golang/"+c.Name+"@"+c.Version {
			t.Errorf("%s: %s has purl %q", path, c.Name, c.PURL)
		}
	}
	for mod, v := range want {
		if found[mod] != v {
			t.Errorf("%s: %s at %q, want %s", path, mod, found[mod], v)
		}
	}
}

// checkImage pushes the release's image with `make image-push` to the in-process
// registry, pulls it back with go-containerregistry, checks each platform's config and
// SBOM referrer, and runs the linux/amd64 kplug it contains.
func checkImage(t *testing.T, r releaseBuild) {
	reg := startRegistry(t)
	dockerConfig := t.TempDir()
	auth := func(user, pw string) string {
		return fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.Host, b64(user+":"+pw))
	}
	writeFile(t, filepath.Join(dockerConfig, "config.json"), auth("pusher", reg.PusherPassword))
	ref := reg.Host + "/kplug/kplug:" + strings.ReplaceAll(r.version, "+", "_")
	push := exec.Command("make", "--no-print-directory", "image-push", "IMAGE="+ref)
	push.Dir = r.clone
	push.Env = append(os.Environ(), "DOCKER_CONFIG="+dockerConfig)
	out, err := push.Output()
	if err != nil {
		t.Fatalf("make image-push: %v\n%s", err, out)
	}
	pushedDigest := strings.TrimSpace(string(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:]))

	// Pull as another user with nothing but go-containerregistry.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	puller := remote.WithAuth(&authn.Basic{Username: "puller", Password: reg.PullerPassword})
	tag, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(tag, remote.WithContext(ctx), puller)
	if err != nil {
		t.Fatalf("pull the index %s: %v", ref, err)
	}
	if d, _ := idx.Digest(); d.String() != pushedDigest {
		t.Errorf("index digest %s, make image-push printed %q", d, pushedDigest)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range im.Manifests {
		platforms = append(platforms, m.Platform.String())
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64/v8"}, platforms); diff != "" {
		t.Errorf("image platforms (-want +got):\n%s", diff)
	}
	if im.Annotations["org.opencontainers.image.version"] != r.version {
		t.Errorf("index annotations %v", im.Annotations)
	}
	for _, m := range im.Manifests {
		checkPlatformImage(ctx, t, r, tag.Context().Digest(m.Digest.String()), m.Platform, puller)
	}
}

func checkPlatformImage(ctx context.Context, t *testing.T, r releaseBuild, ref name.Digest, p *ggcrv1.Platform, auth remote.Option) {
	t.Helper()
	img, err := remote.Image(ref, remote.WithContext(ctx), auth)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != p.Architecture || c.User != "65532:65532" ||
		!slices.Equal(c.Entrypoint, []string{"/usr/local/bin/kplug"}) || c.WorkingDir != "/home/nonroot" {
		t.Errorf("%s config: os %s arch %s user %q entrypoint %q workdir %q", p, cf.OS, cf.Architecture, c.User, c.Entrypoint, c.WorkingDir)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.version":  r.version,
		"org.opencontainers.image.source":   "https://github.com/kplug/kplug",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.title":    "kplug",
	} {
		if c.Labels[k] != v {
			t.Errorf("%s label %s = %q, want %q", p, k, c.Labels[k], v)
		}
	}
	if rev := c.Labels["org.opencontainers.image.revision"]; len(rev) != 40 {
		t.Errorf("%s label revision %q", p, rev)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: %d layers, %v; want 1", p, len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	var kplug []byte
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		if h.Name == "usr/local/bin/kplug" {
			if kplug, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if h := files["home/nonroot/"]; h == nil || h.Uid != 65532 {
		t.Errorf("%s: the non-root user's home is %+v", p, h)
	}
	if files["etc/passwd"] == nil || files["usr/share/doc/kplug/LICENSE"] == nil || kplug == nil {
		t.Errorf("%s: layer lacks /etc/passwd, the licence or kplug: %v", p, slices.Sorted(maps.Keys(files)))
	}
	// The binary is the release's: the same bytes as in the archive.
	archived, _ := readArchive(t, filepath.Join(r.dir, r.archive("linux/"+p.Architecture)))
	if !bytes.Equal(archived["kplug"], kplug) {
		t.Errorf("%s: the image's kplug is not the archive's", p)
	}
	if p.Architecture == runtime.GOARCH && runtime.GOOS == "linux" {
		path := filepath.Join(t.TempDir(), "kplug")
		if err := os.WriteFile(path, kplug, 0o755); err != nil {
			t.Fatal(err)
		}
		argv := []string{path, "version"}
		// As the image's user, when this test may switch to it.
		if setpriv, err := exec.LookPath("setpriv"); err == nil && os.Geteuid() == 0 {
			if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			argv = append([]string{setpriv, "--reuid=65532", "--regid=65532", "--clear-groups"}, argv...)
		}
		out, err := exec.Command(argv[0], argv[1:]...).Output()
		if err != nil || !strings.HasPrefix(string(out), "kplug: "+r.version+"\n") || !strings.Contains(string(out), "platform: linux/"+runtime.GOARCH+"\n") {
			t.Errorf("%s from the image: %q, %v", strings.Join(argv, " "), out, err)
		}
	}

	// The SBOM is a referrer of the image.
	referrers, err := remote.Referrers(ref, remote.WithContext(ctx), auth)
	if err != nil {
		t.Fatalf("referrers of %s: %v", ref, err)
	}
	rm, err := referrers.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 || rm.Manifests[0].ArtifactType != "application/vnd.cyclonedx+json" {
		t.Fatalf("%s: referrers %+v, want one CycloneDX SBOM", p, rm.Manifests)
	}
	art, err := remote.Image(ref.Context().Digest(rm.Manifests[0].Digest.String()), remote.WithContext(ctx), auth)
	if err != nil {
		t.Fatal(err)
	}
	artLayers, err := art.Layers()
	if err != nil || len(artLayers) != 1 {
		t.Fatalf("SBOM artifact: %d layers, %v", len(artLayers), err)
	}
	lrc, err := artLayers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	sbom, err := io.ReadAll(lrc)
	lrc.Close()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(filepath.Join(r.dir, r.archive("linux/"+p.Architecture)+".sbom.cdx.json"))
	if !bytes.Equal(sbom, want) {
		t.Errorf("%s: the attached SBOM is not the release's", p)
	}
}

// checkKrew installs the release's krew manifest and linux archive with the real krew, as
// a user would from krew-index, and runs `kubectl kplug version` with the pinned kubectl.
func checkKrew(t *testing.T, r releaseBuild) {
	if runtime.GOOS != "linux" {
		t.Skip("the e2e tests run on linux")
	}
	krew := framework.ToolForTest(t, "krew")
	kubectl := framework.ToolForTest(t, "kubectl")
	root := t.TempDir()
	env := append(os.Environ(), "KREW_ROOT="+root, "KREW_NO_UPGRADE_CHECK=1", "HOME="+root)
	platform := runtime.GOOS + "/" + runtime.GOARCH
	install := exec.Command(krew, "install", "--manifest="+filepath.Join(r.dir, "kplug.krew.yaml"),
		"--archive="+filepath.Join(r.dir, r.archive(platform)))
	install.Env = env
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("krew install: %v\n%s", err, out)
	}
	env = append(env, "PATH="+filepath.Join(root, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd := exec.Command(kubectl, "kplug", "version", "-o", "json")
	cmd.Env = env
	out, err := cmd.Output()
	var info struct{ Kplug string }
	if err := errors.Join(err, json.Unmarshal(out, &info)); err != nil || info.Kplug != r.version {
		t.Errorf("kubectl kplug version: %q, %v; want %s", out, err, r.version)
	}
	list := exec.Command(kubectl, "plugin", "list", "--name-only")
	list.Env = env
	if out, err := list.CombinedOutput(); err != nil || !strings.Contains(string(out), "kubectl-kplug") {
		t.Errorf("kubectl plugin list: %q, %v", out, err)
	}
}
