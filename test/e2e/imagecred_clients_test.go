package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker-credential-helpers/client"
	"github.com/docker/docker-credential-helpers/credentials"

	"github.com/kplug/kplug/internal/testkit/registrytest"
	"github.com/kplug/kplug/test/e2e/framework"
)

// helperSetup is a registry that wants a password, a kubelet-style provider plugin that
// answers with it (counting its runs), and docker-credential-kplug on PATH with a disk
// cache: what a user of a registry client configures.
type helperSetup struct {
	reg    *registrytest.Registry
	ref    string
	digest string
	dir    string
	runs   string // one line per plugin run
	helper string
}

func newHelperSetup(t *testing.T, dockerConfig func(host string) string) *helperSetup {
	t.Helper()
	s := &helperSetup{reg: registrytest.Start(t), dir: t.TempDir()}
	s.ref = s.reg.Host + "/team/client:v1"
	s.digest = s.reg.Push(t, s.ref, 2048, 2).String()
	binDir := filepath.Join(s.dir, "plugins")
	if err := os.MkdirAll(binDir, 0o700); err != nil {
		t.Fatal(err)
	}
	s.runs = filepath.Join(s.dir, "plugin-runs")
	writeExecutable(t, filepath.Join(binDir, "registry-login"), fmt.Sprintf(`#!/bin/sh
cat > /dev/null
echo run >> %q
printf '%%s' '{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"1h","auth":{"%s":{"username":"puller","password":"%s"}}}'
`, s.runs, s.reg.Host, s.reg.PullerPassword))
	config := filepath.Join(s.dir, "config.yaml")
	writeFile(t, config, fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: registry-login
  matchImages: [%q]
  defaultCacheDuration: 1m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
`, s.reg.Host))
	s.helper = installDockerHelper(t, s.dir, config, binDir, dockerConfig(s.reg.Host))
	return s
}

// requireCommand is the path of a program a Debian package provides (make deps installs
// it); the test skips without it unless KPLUG_E2E_REQUIRED is set.
func requireCommand(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(framework.RequireEnv) != "" {
			t.Fatalf("%s is missing: run make deps (Debian package %s)", name, pkg)
		}
		t.Skipf("skipping: %s is missing (Debian package %s; make deps installs it)", name, pkg)
	}
	return path
}

func runClient(ctx context.Context, t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); err != nil && errors.As(err, &ee) {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, ee.Stderr)
	}
	return string(out), err
}

// TestImageCredentialSkopeo pulls with skopeo (containers/image), configured as its users
// configure a credential helper: credHelpers in the auth file, the helper on PATH. skopeo
// asks docker-credential-kplug for the registry, the helper runs the provider plugin, and
// the copy is authenticated; a second pull is served from the helper's disk cache.
func TestImageCredentialSkopeo(t *testing.T) {
	skopeo := requireCommand(t, "skopeo", "skopeo")
	s := newHelperSetup(t, func(string) string { return `{}` })
	authFile := filepath.Join(s.dir, "auth.json")
	writeFile(t, authFile, fmt.Sprintf(`{"credHelpers":{%q:"kplug"}}`, s.reg.Host))
	t.Setenv("REGISTRY_AUTH_FILE", authFile)
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// Without the helper the registry refuses skopeo.
	if out, err := runClient(ctx, t, skopeo, "inspect", "--tls-verify=false", "--no-creds", "docker://"+s.ref); err == nil {
		t.Fatalf("an anonymous skopeo inspect succeeded: %s", out)
	}
	out, err := runClient(ctx, t, skopeo, "inspect", "--tls-verify=false", "docker://"+s.ref)
	if err != nil {
		t.Fatal(err)
	}
	var inspected struct{ Digest string }
	if err := json.Unmarshal([]byte(out), &inspected); err != nil || inspected.Digest != s.digest {
		t.Errorf("skopeo inspect: digest %q (%v), want %s", inspected.Digest, err, s.digest)
	}
	dest := filepath.Join(s.dir, "copy")
	if _, err := runClient(ctx, t, skopeo, "copy", "--src-tls-verify=false", "docker://"+s.ref, "dir:"+dest); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dest, "manifest.json")); err != nil {
		t.Errorf("skopeo copy wrote no manifest: %v", err)
	}
	if runs := countLines(t, s.runs); runs != 1 {
		t.Errorf("the provider plugin ran %d times for two skopeo commands, want 1 (the helper's disk cache)", runs)
	}
}

// TestImageCredentialCrane pulls with the crane CLI (go-containerregistry, the pinned
// release), configured as its users configure a helper: credHelpers in
// $DOCKER_CONFIG/config.json and docker-credential-kplug on PATH.
func TestImageCredentialCrane(t *testing.T) {
	crane := framework.ToolForTest(t, "crane")
	s := newHelperSetup(t, func(host string) string { return fmt.Sprintf(`{"credHelpers":{%q:"kplug"}}`, host) })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	out, err := runClient(ctx, t, crane, "digest", "--insecure", s.ref)
	if err != nil || strings.TrimSpace(out) != s.digest {
		t.Fatalf("crane digest: %q, %v; want %s", out, err, s.digest)
	}
	tarball := filepath.Join(s.dir, "image.tar")
	if _, err := runClient(ctx, t, crane, "pull", "--insecure", s.ref, tarball); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(tarball); err != nil || info.Size() < 4096 {
		t.Errorf("crane pull wrote %v, %v", info, err)
	}
	if runs := countLines(t, s.runs); runs != 1 {
		t.Errorf("the provider plugin ran %d times for two crane commands, want 1 (the helper's disk cache)", runs)
	}
	// Without the helper configured, crane goes anonymous and is refused.
	writeFile(t, filepath.Join(s.dir, "home", ".docker", "config.json"), `{}`)
	if out, err := runClient(ctx, t, crane, "digest", "--insecure", s.ref); err == nil {
		t.Errorf("crane digest without the helper succeeded: %s", out)
	}
}

// TestImageCredentialDockerHelperProtocol drives the rest of the protocol with
// docker-credential-helpers' own client, as docker does: list names what the helper's
// cache holds, store and erase are refused and never reach a plugin.
func TestImageCredentialDockerHelperProtocol(t *testing.T) {
	s := newHelperSetup(t, func(string) string { return `{"credsStore":"kplug"}` })
	program := client.NewShellProgramFunc(s.helper)

	if got, err := client.List(program); err != nil || len(got) != 0 {
		t.Errorf("list before any get: %v, %v; want empty", got, err)
	}
	got, err := client.Get(program, s.reg.Host)
	if err != nil || got.Username != "puller" || got.Secret != s.reg.PullerPassword {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if list, err := client.List(program); err != nil || len(list) != 1 || list[s.reg.Host] != "puller" {
		t.Errorf("list after a get: %v, %v; want {%s: puller}", list, err, s.reg.Host)
	}
	err = client.Store(program, &credentials.Credentials{ServerURL: s.reg.Host, Username: "someone", Secret: "s3cret"})
	if err == nil || !strings.Contains(err.Error(), `"store" is not supported: this credential helper is read-only`) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("store: %v; want the read-only refusal, without the secret", err)
	}
	err = client.Erase(program, s.reg.Host)
	if err == nil || !strings.Contains(err.Error(), `"erase" is not supported`) {
		t.Errorf("erase: %v; want the read-only refusal", err)
	}
	if got, err := client.Get(program, "quay.io"); !credentials.IsErrCredentialsNotFound(err) {
		t.Errorf("get for a registry no provider matches: %+v, %v; want credentials not found", got, err)
	}
	if runs := countLines(t, s.runs); runs != 1 {
		t.Errorf("the provider plugin ran %d times, want 1", runs)
	}
}
