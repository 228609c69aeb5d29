package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: distroless's "nonroot", which kubelets and admission policies that
// require runAsNonRoot accept.
const (
	imageUID  = 65532
	imageUser = "65532:65532"
	imageHome = "/home/nonroot"
	imageBin  = "/usr/local/bin/kplug"
)

// imagePlatforms are the platforms the image is built for, from the release's builds.
var imagePlatforms = []platform{{"linux", "amd64"}, {"linux", "arm64"}}

// writeImage writes the kplug image as an OCI image layout in dir: an index of the
// linux/amd64 and linux/arm64 images (the platforms of imagePlatforms that were built),
// and for each image an SBOM artifact whose subject is that image (an OCI referrer).
func writeImage(_ context.Context, dir, src, version string, c commit, built []archive) error {
	labels := imageLabels(version, c)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var artifacts []v1.Image
	for _, a := range built {
		if !containsPlatform(imagePlatforms, a.platform) {
			continue
		}
		img, err := platformImage(a, src, c, labels)
		if err != nil {
			return fmt.Errorf("image for %s: %w", a.platform, err)
		}
		desc, err := partial.Descriptor(img)
		if err != nil {
			return err
		}
		desc.Platform = ociPlatform(a.platform)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: *desc})
		art, err := sbomArtifact(a.sbom, a.name+sbomSuffix, *desc, c.time)
		if err != nil {
			return err
		}
		artifacts = append(artifacts, art)
	}
	if len(artifacts) == 0 {
		return nil // no linux build to put in an image
	}
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": version})); err != nil {
		return err
	}
	for _, art := range artifacts {
		if err := p.AppendImage(art); err != nil {
			return err
		}
	}
	return nil
}

func containsPlatform(ps []platform, p platform) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

func ociPlatform(p platform) *v1.Platform {
	v := &v1.Platform{OS: p.os, Architecture: p.arch}
	if p.arch == "arm64" {
		v.Variant = "v8"
	}
	return v
}

// imageLabels are the OCI annotations (https://github.com/opencontainers/image-spec/blob/main/annotations.md)
// of the image: labels of its config, and annotations of its manifests and index.
func imageLabels(version string, c commit) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":         "kplug",
		"org.opencontainers.image.description":   "Pluggable credentials and proxies for Kubernetes: kplug peerproxy, image credential provider plugins",
		"org.opencontainers.image.version":       version,
		"org.opencontainers.image.revision":      c.revision,
		"org.opencontainers.image.created":       c.time.Format(time.RFC3339),
		"org.opencontainers.image.source":        "https://github.com/kplug/kplug",
		"org.opencontainers.image.url":           "https://github.com/kplug/kplug",
		"org.opencontainers.image.documentation": "https://github.com/kplug/kplug/tree/main/docs",
		"org.opencontainers.image.licenses":      "Apache-2.0",
		"org.opencontainers.image.vendor":        "kplug",
	}
}

// platformImage is the image of one platform: FROM scratch, one layer holding kplug (the
// release's static binary), the licence, a passwd entry for the non-root user and its home,
// and /tmp. kplug needs no CA bundle in the image: it carries Mozilla's roots
// (golang.org/x/crypto/x509roots/fallback/bundle), which the token-exchange plugin loads
// as Go's fallback roots, used only where the system has none.
func platformImage(a archive, src string, c commit, labels map[string]string) (v1.Image, error) {
	kplug, err := os.ReadFile(filepath.Join(a.stage, "kplug"))
	if err != nil {
		return nil, err
	}
	license, err := os.ReadFile(filepath.Join(src, "LICENSE"))
	if err != nil {
		return nil, err
	}
	dir := fs.ModeDir | 0o755
	entries := []entry{
		{name: "etc/", mode: dir},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "home/", mode: dir},
		{name: "home/nonroot/", mode: fs.ModeDir | 0o700, uid: imageUID, gid: imageUID},
		{name: "tmp/", mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{name: "usr/", mode: dir},
		{name: "usr/local/", mode: dir},
		{name: "usr/local/bin/", mode: dir},
		{name: "usr/local/bin/kplug", mode: 0o755, data: kplug},
		{name: "usr/share/", mode: dir},
		{name: "usr/share/doc/", mode: dir},
		{name: "usr/share/doc/kplug/", mode: dir},
		{name: "usr/share/doc/kplug/LICENSE", mode: 0o644, data: license},
	}
	layerTar, err := tarEntries(entries, c.time)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: c.time}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: created, CreatedBy: "hack/release (go-containerregistry)", Comment: "kplug " + labels["org.opencontainers.image.version"]},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	p := ociPlatform(a.platform)
	cf.OS, cf.Architecture, cf.Variant, cf.Created = p.OS, p.Architecture, p.Variant, created
	cf.Config = v1.Config{
		User:       imageUser,
		Entrypoint: []string{imageBin},
		Env:        []string{"PATH=/usr/local/bin", "HOME=" + imageHome},
		WorkingDir: imageHome,
		Labels:     labels,
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// emptyConfig is the OCI empty descriptor's content, the config of an artifact.
var emptyConfig = []byte("{}")

// sbomArtifact is an OCI 1.1 artifact manifest holding sbom, whose subject is the image
// described by subject: what `oras discover` and the referrers API list for the image.
func sbomArtifact(sbom []byte, title string, subject v1.Descriptor, created time.Time) (v1.Image, error) {
	layer := static.NewLayer(sbom, sbomMediaType)
	layerDigest, err := layer.Digest()
	if err != nil {
		return nil, err
	}
	configDigest, _, err := v1.SHA256(bytes.NewReader(emptyConfig))
	if err != nil {
		return nil, err
	}
	subject.Platform, subject.Annotations = nil, nil
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  sbomMediaType,
		Config:        v1.Descriptor{MediaType: types.OCIEmptyJSON, Digest: configDigest, Size: int64(len(emptyConfig)), Data: emptyConfig},
		Layers: []v1.Descriptor{{
			MediaType:   sbomMediaType,
			Digest:      layerDigest,
			Size:        int64(len(sbom)),
			Annotations: map[string]string{"org.opencontainers.image.title": title},
		}},
		Subject:     &subject,
		Annotations: map[string]string{"org.opencontainers.image.created": created.Format(time.RFC3339)},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, layer: layer, layerDigest: layerDigest})
}

// artifact is an image whose manifest is given as it is to be pushed (ggcr's mutate
// cannot set artifactType or an empty config).
type artifact struct {
	manifest    []byte
	layer       v1.Layer
	layerDigest v1.Hash
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return emptyConfig, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h == a.layerDigest {
		return a.layer, nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}

// push pushes the image layout in dir to ref: the index under ref's tag, then each SBOM
// artifact by digest (in a registry without the referrers API, go-containerregistry also
// keeps the sha256-<digest> fallback tag the OCI distribution spec defines). Credentials
// come from the docker config, as for docker and crane; a registry on a loopback or
// private address is spoken to over plain HTTP, as crane does. It returns the index's
// digest.
func push(ctx context.Context, dir, ref string) (string, error) {
	tag, err := name.ParseReference(ref)
	if err != nil {
		return "", usageError{fmt.Errorf("invalid image reference %q: %w", ref, err)}
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return "", fmt.Errorf("reading the image layout %s (run make release first): %w", dir, err)
	}
	root, err := p.ImageIndex()
	if err != nil {
		return "", err
	}
	im, err := root.IndexManifest()
	if err != nil {
		return "", err
	}
	remoteOpts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	var indexDigest string
	for _, d := range im.Manifests {
		if d.MediaType != types.OCIImageIndex {
			continue
		}
		idx, err := root.ImageIndex(d.Digest)
		if err != nil {
			return "", err
		}
		if err := remote.WriteIndex(tag, idx, remoteOpts...); err != nil {
			return "", fmt.Errorf("pushing the image index to %s: %w", tag, err)
		}
		indexDigest = d.Digest.String()
	}
	if indexDigest == "" {
		return "", fmt.Errorf("the layout %s holds no image index", dir)
	}
	for _, d := range im.Manifests {
		if d.MediaType != types.OCIManifestSchema1 {
			continue
		}
		img, err := root.Image(d.Digest)
		if err != nil {
			return "", err
		}
		if err := remote.Write(tag.Context().Digest(d.Digest.String()), img, remoteOpts...); err != nil {
			return "", fmt.Errorf("pushing the SBOM %s to %s: %w", d.Digest, tag.Context(), err)
		}
	}
	return indexDigest, nil
}
