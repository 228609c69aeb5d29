package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// sbomSuffix follows an archive's name to name its SBOM.
const sbomSuffix = ".sbom.cdx.json"

// sbomMediaType is the SBOM's media type, as an OCI artifact too.
const sbomMediaType = "application/vnd.cyclonedx+json"

// makeSBOM runs syft on a platform's stage directory (the programs' Go build information
// names every module linked, at its version) and returns the CycloneDX JSON, normalized,
// with f (how the programs were built) as its formulation.
func makeSBOM(ctx context.Context, syft, stage, version string, created time.Time, environ []string, f formula) ([]byte, error) {
	// syft derives the document's root bom-ref from the path it is given: "." in the
	// stage, so that it does not depend on where the stage is.
	cmd := exec.CommandContext(ctx, syft, "scan", "dir:.", "--output", "cyclonedx-json",
		"--source-name", "kplug", "--source-version", version, "--quiet")
	cmd.Dir = stage
	// The pinned syft with its defaults: no SYFT_* variable of the builder's (some add
	// licences found on the machine or the network), no update check, and a home without
	// a syft config file of the user's.
	home, err := os.MkdirTemp("", "kplug-release-syft-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	builder := envMap(environ)
	cmd.Env = []string{"SYFT_CHECK_FOR_APP_UPDATE=false", "HOME=" + home, "XDG_CONFIG_HOME=" + home, "XDG_CACHE_HOME=" + home}
	for _, k := range []string{"PATH", "TMPDIR", "SYSTEMROOT", "TEMP", "TMP"} {
		if v, ok := builder[envKey(k)]; ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", syft, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return normalizeSBOM(out, created, f)
}

// normalizeSBOM makes syft's output a function of its input and adds f as the document's
// formulation. syft sets the CycloneDX serialNumber to a random UUID and
// metadata.timestamp to the current time (anchore/syft#3931); here the timestamp is the
// commit's, and the serial number a name-based (version 5) UUID of the document without
// it, so that the same content has the same serial number, as reproducible-builds.org
// advises for SBOMs.
func normalizeSBOM(raw []byte, created time.Time, f formula) ([]byte, error) {
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
	// The formulation is in CycloneDX from 1.5 on.
	if v, _ := doc["specVersion"].(string); !slices.Contains([]string{"1.5", "1.6", "1.7"}, v) {
		return nil, fmt.Errorf("syft wrote CycloneDX %q; the release's SBOMs need 1.5 or later for their formulation", v)
	}
	if _, ok := doc["formulation"]; ok {
		return nil, errors.New("syft's CycloneDX document already has a formulation")
	}
	doc["formulation"] = []formula{f}
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

// A formula is CycloneDX's record of how the BOM's subject was made (its formulation,
// CycloneDX 1.5): here the Go toolchain as a component, and one workflow, go build, whose
// input is the environment the release set and whose steps are the programs, each with
// the go command it ran and the build settings its binary records. Property names are
// the registered cdx:gomod:build:env ones where the taxonomy has them, kplug:go:build:
// and the setting's name as the go command records it otherwise.
type formula struct {
	BOMRef     string         `json:"bom-ref"`
	Components []cdxComponent `json:"components"`
	Workflows  []cdxWorkflow  `json:"workflows"`
}

type cdxComponent struct {
	Type        string `json:"type"`
	BOMRef      string `json:"bom-ref"`
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description"`
}

type cdxWorkflow struct {
	BOMRef             string     `json:"bom-ref"`
	UID                string     `json:"uid"`
	Name               string     `json:"name"`
	Description        string     `json:"description"`
	TaskTypes          []string   `json:"taskTypes"`
	ResourceReferences []cdxRef   `json:"resourceReferences"`
	Inputs             []cdxInput `json:"inputs"`
	Steps              []cdxStep  `json:"steps"`
}

type cdxRef struct {
	Ref string `json:"ref"`
}

type cdxInput struct {
	EnvironmentVars []cdxProperty `json:"environmentVars"`
}

type cdxStep struct {
	Name     string       `json:"name"`
	Commands []cdxCommand `json:"commands"`
}

type cdxCommand struct {
	Executed   string        `json:"executed"`
	Properties []cdxProperty `json:"properties"`
}

type cdxProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// gomodEnv are the build settings the CycloneDX property taxonomy names
// (cdx:gomod:build:env:*).
var gomodEnv = []string{"GOOS", "GOARCH", "CGO_ENABLED"}

// formulation records how the programs built for p were made: the toolchain, the
// environment tc set (what does not depend on the builder's machine: the caches, the
// proxy, PATH and HOME are left out) and each program's build settings.
func formulation(tc toolchain, p platform, built []builtProgram) formula {
	const toolchainRef = "kplug-release:go-toolchain"
	var env []cdxProperty
	for _, kv := range tc.platformEnv(p) {
		k, v, _ := strings.Cut(kv, "=")
		if !slices.Contains(passedThrough, k) && !slices.Contains(resolved, k) {
			env = append(env, cdxProperty{k, v})
		}
	}
	w := cdxWorkflow{
		BOMRef:             "kplug-release:go-build",
		UID:                "go-build-" + p.os + "-" + p.arch,
		Name:               "go build for " + p.String(),
		Description:        "hack/release builds each program with the toolchain go.mod pins, in an environment it makes rather than inherits",
		TaskTypes:          []string{"build"},
		ResourceReferences: []cdxRef{{toolchainRef}},
		Inputs:             []cdxInput{{env}},
	}
	for _, b := range built {
		props := []cdxProperty{{"cdx:gomod:build:env:GOVERSION", b.info.GoVersion}}
		for _, s := range b.info.Settings {
			name := "kplug:go:build:" + s.Key
			if slices.Contains(gomodEnv, s.Key) {
				name = "cdx:gomod:build:env:" + s.Key
			}
			props = append(props, cdxProperty{name, s.Value})
		}
		w.Steps = append(w.Steps, cdxStep{Name: b.name, Commands: []cdxCommand{{commandLine(b.executed), props}}})
	}
	return formula{
		BOMRef: "kplug-release:formula",
		Components: []cdxComponent{{
			Type: "application", BOMRef: toolchainRef, Name: "go", Version: tc.goVersion,
			Description: "the Go toolchain that compiled the programs: go.mod's toolchain line",
		}},
		Workflows: []cdxWorkflow{w},
	}
}

// commandLine is the go command with args, as a POSIX shell would take it.
func commandLine(args []string) string {
	quoted := []string{"go"}
	for _, a := range args {
		if strings.ContainsAny(a, " \t\n\"'$`\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		quoted = append(quoted, a)
	}
	return strings.Join(quoted, " ")
}
