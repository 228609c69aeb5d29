package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/google/uuid"
)

// sbomSuffix follows an archive's name to name its SBOM.
const sbomSuffix = ".sbom.cdx.json"

// sbomMediaType is the SBOM's media type, as an OCI artifact too.
const sbomMediaType = "application/vnd.cyclonedx+json"

// makeSBOM runs syft on a platform's stage directory (the programs' Go build information
// names every module linked, at its version) and returns the CycloneDX JSON, normalized.
func makeSBOM(ctx context.Context, syft, stage, version string, created time.Time) ([]byte, error) {
	// syft derives the document's root bom-ref from the path it is given: "." in the
	// stage, so that it does not depend on where the stage is.
	cmd := exec.CommandContext(ctx, syft, "scan", "dir:.", "--output", "cyclonedx-json",
		"--source-name", "kplug", "--source-version", version, "--quiet")
	cmd.Dir = stage
	// The pinned syft with its defaults: no update check, and a home without a syft
	// config file of the user's.
	home, err := os.MkdirTemp("", "kplug-release-syft-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	cmd.Env = append(os.Environ(), "SYFT_CHECK_FOR_APP_UPDATE=false", "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", syft, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return normalizeSBOM(out, created)
}

// normalizeSBOM makes syft's output a function of its input. syft sets the CycloneDX
// serialNumber to a random UUID and metadata.timestamp to the current time
// (anchore/syft#3931); here the timestamp is the commit's, and the serial number a
// name-based (version 5) UUID of the document without it, so that the same content has
// the same serial number, as reproducible-builds.org advises for SBOMs.
func normalizeSBOM(raw []byte, created time.Time) ([]byte, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("syft's output is not JSON: %w", err)
	}
	if doc["bomFormat"] != "CycloneDX" {
		return nil, errors.New("syft's output is not a CycloneDX document")
	}
	meta, ok := doc["metadata"].(map[string]any)
	if !ok {
		return nil, errors.New("syft's CycloneDX document has no metadata")
	}
	meta["timestamp"] = created.UTC().Format(time.RFC3339)
	delete(doc, "serialNumber")
	content, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	doc["serialNumber"] = uuid.NewSHA1(uuid.NameSpaceURL, content).URN()
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
