package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var epoch = time.Date(2026, 11, 24, 14, 32, 36, 0, time.UTC)

// stage writes a platform's stage directory.
func stage(t *testing.T, p platform) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		p.exe("kplug"): "kplug binary", p.exe("kplug-exec-cache"): "exec-cache binary",
		p.exe("kplug-proxy-plugin"): "proxy-plugin binary",
		"LICENSE":                   "Apache License", "README.md": "# kplug",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type listed struct {
	Name  string
	Mode  fs.FileMode
	UID   int
	Time  time.Time
	Bytes string
}

func TestArchiveLayout(t *testing.T) {
	t.Parallel()
	linux := platform{"linux", "arm64"}
	data, err := packArchive(stage(t, linux), linux, epoch)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header names %q, time %v; want neither", zr.Name, zr.ModTime)
	}
	var got []listed
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got = append(got, listed{h.Name, h.FileInfo().Mode(), h.Uid, h.ModTime.UTC(), string(b)})
		if h.Uname != "" || h.Gname != "" || h.Format == tar.FormatGNU {
			t.Errorf("%s: uname %q gname %q format %v", h.Name, h.Uname, h.Gname, h.Format)
		}
	}
	want := []listed{
		{"LICENSE", 0o644, 0, epoch, "Apache License"},
		{"README.md", 0o644, 0, epoch, "# kplug"},
		{"kplug", 0o755, 0, epoch, "kplug binary"},
		{"kplug-exec-cache", 0o755, 0, epoch, "exec-cache binary"},
		{"kplug-proxy-plugin", 0o755, 0, epoch, "proxy-plugin binary"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tar.gz entries (-want +got):\n%s", diff)
	}

	windows := platform{"windows", "amd64"}
	data, err = packArchive(stage(t, windows), windows, epoch)
	if err != nil {
		t.Fatal(err)
	}
	zipr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, f := range zipr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		got = append(got, listed{f.Name, f.Mode(), 0, f.Modified.UTC(), string(b)})
	}
	want = []listed{
		{"LICENSE", 0o644, 0, epoch, "Apache License"},
		{"README.md", 0o644, 0, epoch, "# kplug"},
		{"kplug-exec-cache.exe", 0o755, 0, epoch, "exec-cache binary"},
		{"kplug-proxy-plugin.exe", 0o755, 0, epoch, "proxy-plugin binary"},
		{"kplug.exe", 0o755, 0, epoch, "kplug binary"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("zip entries (-want +got):\n%s", diff)
	}
}

// The same files give the same archive bytes whatever the files' times, modes and owner
// on disk, and wherever the stage is.
func TestArchiveIsAFunctionOfContent(t *testing.T) {
	t.Parallel()
	for _, p := range []platform{{"linux", "amd64"}, {"windows", "arm64"}} {
		a, b := stage(t, p), stage(t, p)
		if err := os.Chtimes(filepath.Join(b, "LICENSE"), time.Unix(1, 0), time.Unix(1, 0)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(b, "README.md"), 0o640); err != nil {
			t.Fatal(err)
		}
		first, err := packArchive(a, p, epoch)
		if err != nil {
			t.Fatal(err)
		}
		second, err := packArchive(b, p, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, second) {
			t.Errorf("%s: two archives of the same files differ", p)
		}
		later, err := packArchive(a, p, epoch.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(first, later) {
			t.Errorf("%s: the archive does not carry the commit time", p)
		}
	}
}

func TestNormalizeSBOM(t *testing.T) {
	t.Parallel()
	doc := func(serial, ts string) []byte {
		return []byte(`{"bomFormat":"CycloneDX","specVersion":"1.6","serialNumber":"` + serial + `","version":1,
"metadata":{"timestamp":"` + ts + `","component":{"name":"kplug","version":"v1.2.3"}},
"components":[{"name":"k8s.io/client-go","version":"v0.36.3","purl":"pkg:golang/k8s.io/client-go@v0.36.3"}]}`)
	}
	a, err := normalizeSBOM(doc("urn:uuid:1b4e28ba-2fa1-11d2-883f-0016d3cca427", "2026-11-25T09:00:00Z"), epoch, formula{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := normalizeSBOM(doc("urn:uuid:6ba7b810-9dad-11d1-80b4-00c04fd430c8", "2026-12-01T10:11:12+01:00"), epoch, formula{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("two runs differing only in serial number and time normalize differently:\n%s\n%s", a, b)
	}
	for _, want := range []string{`"timestamp": "2026-11-24T14:32:36Z"`, `"serialNumber": "urn:uuid:`, "\"version\": 1\n}"} {
		if !bytes.Contains(a, []byte(want)) {
			t.Errorf("normalized SBOM lacks %s:\n%s", want, a)
		}
	}
	other := bytes.Replace(doc("x", "y"), []byte("v0.36.3"), []byte("v0.36.4"), 2)
	c, err := normalizeSBOM(other, epoch, formula{})
	if err != nil {
		t.Fatal(err)
	}
	serial := func(b []byte) string { _, s, _ := strings.Cut(string(b), `"serialNumber": "`); return s[:45] }
	if serial(a) == serial(c) {
		t.Errorf("different content, same serial number %s", serial(a))
	}
	for _, bad := range []string{
		`not json`, `{"bomFormat":"SPDX"}`, `{"bomFormat":"CycloneDX"}`,
		`{"bomFormat":"CycloneDX","specVersion":"1.4","metadata":{}}`,
		`{"bomFormat":"CycloneDX","specVersion":"1.6","metadata":{},"formulation":[]}`,
	} {
		if _, err := normalizeSBOM([]byte(bad), epoch, formula{}); err == nil {
			t.Errorf("normalizeSBOM(%s) succeeded", bad)
		}
	}
}

func TestParsePlatforms(t *testing.T) {
	t.Parallel()
	got, err := parsePlatforms("linux/amd64, windows/arm64")
	if err != nil || len(got) != 2 || got[1] != (platform{"windows", "arm64"}) {
		t.Errorf("parsePlatforms = %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"linux":                   `invalid platform "linux": want GOOS/GOARCH, e.g. linux/amd64`,
		"linux/amd64,linux/amd64": "platform linux/amd64 given twice",
		"linux/arm/v7":            `invalid platform "linux/arm/v7": want GOOS/GOARCH, e.g. linux/amd64`,
	} {
		if _, err := parsePlatforms(in); err == nil || err.Error() != want {
			t.Errorf("parsePlatforms(%q) = %v, want %s", in, err, want)
		}
	}
}

func TestKrewManifestNamesOnlyBuiltArchives(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "kplug.yaml")
	if err := os.WriteFile(tmpl, []byte(`version: {{ .Version }}
uri: https://example/{{ .Version }}/{{ archive "linux" "amd64" }}
sha256: {{ sha256 "linux" "amd64" }}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.yaml")
	built := []archive{{platform: platform{"linux", "amd64"}, name: "kplug_1.2.3_linux_amd64.tar.gz", sha256: "abc"}}
	if err := writeKrewManifest(tmpl, out, "v1.2.3", built); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	if want := "version: v1.2.3\nuri: https://example/v1.2.3/kplug_1.2.3_linux_amd64.tar.gz\nsha256: abc\n"; string(got) != want {
		t.Errorf("rendered:\n%s\nwant\n%s", got, want)
	}
	err := writeKrewManifest(tmpl, out, "v1.2.3", []archive{{platform: platform{"linux", "arm64"}}})
	if err == nil || !strings.Contains(err.Error(), "the krew manifest names linux/amd64, which this release did not build") {
		t.Errorf("missing archive: %v", err)
	}
}

func TestChecksums(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, content := range map[string]string{"b.zip": "b", "a.tar.gz": "a", checksumsFile: "old"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeChecksums(dir); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, checksumsFile))
	want := "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb  a.tar.gz\n" +
		"3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d  b.zip\n"
	if string(got) != want {
		t.Errorf("SHA256SUMS:\n%s\nwant\n%s", got, want)
	}
}

func TestArchiveName(t *testing.T) {
	t.Parallel()
	for p, want := range map[platform]string{
		{"linux", "amd64"}:   "kplug_1.2.3_linux_amd64.tar.gz",
		{"darwin", "arm64"}:  "kplug_1.2.3_darwin_arm64.tar.gz",
		{"windows", "arm64"}: "kplug_1.2.3_windows_arm64.zip",
	} {
		if got := archiveName("v1.2.3", p); got != want {
			t.Errorf("archiveName(%s) = %s, want %s", p, got, want)
		}
	}
}

func TestReplacesOnlyARelease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := checkReplaceable(filepath.Join(dir, "new")); err != nil {
		t.Errorf("a new directory: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkReplaceable(dir); err == nil || !strings.Contains(err.Error(), "is not a release (no SHA256SUMS)") {
		t.Errorf("a directory of other files: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, checksumsFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkReplaceable(dir); err != nil {
		t.Errorf("an earlier release: %v", err)
	}
}
