package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker-credential-helpers/client"
	"github.com/docker/docker-credential-helpers/credentials"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Issue 12 finding 8: docker-helper get gave Docker Hub credentials to a host:port registry such as registry:5000; the kubelet never does.
//
// A provider answers only with Docker Hub credentials (key https://index.docker.io/v1/)
// and matches both Docker Hub and a registry reached as localhost:PORT, a host:port
// without a dot like registry:5000. The helper is asked through the docker credential
// helper protocol by its own client library (as docker does), then by go-containerregistry
// pulling from the registry (as crane and containerd do): Docker Hub gets the credentials,
// the other registry gets "credentials not found" and never sees the Docker Hub password.
func TestSecurityDockerHelperKeepsDockerHubCredentialsForDockerHub(t *testing.T) {
	reg := startRegistry(t)
	_, port, err := net.SplitHostPort(reg.Host)
	if err != nil {
		t.Fatal(err)
	}
	host := "localhost:" + port
	ref := host + "/team/app:v1"
	reg.Push(t, ref, 512, 2)
	hubPassword := randomString(t)

	dir := t.TempDir()
	binDir := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(binDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeExecutable(t, filepath.Join(binDir, "hub"), fmt.Sprintf(`#!/bin/sh
cat > /dev/null
printf '%%s' '{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Global","cacheDuration":"0s","auth":{"https://index.docker.io/v1/":{"username":"hub","password":"%s"}}}'
`, hubPassword))
	config := filepath.Join(dir, "config.yaml")
	writeFile(t, config, fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: hub
  matchImages: [docker.io, %q, "registry:5000"]
  defaultCacheDuration: 0s
  apiVersion: credentialprovider.kubelet.k8s.io/v1
`, host))
	helper := installDockerHelper(t, dir, config, binDir, `{"credsStore":"kplug"}`)
	program := client.NewShellProgramFunc(helper)

	// What docker asks for Docker Hub: the credentials.
	got, err := client.Get(program, "https://index.docker.io/v1/")
	if err != nil || got.Username != "hub" || got.Secret != hubPassword || got.ServerURL != "https://index.docker.io/v1/" {
		t.Fatalf("helper get for Docker Hub: %+v, %v; want the hub credentials", got, err)
	}
	// What docker asks for a host:port registry: the protocol's "not found" answer.
	for _, server := range []string{host, "registry:5000"} {
		got, err := client.Get(program, server)
		if !credentials.IsErrCredentialsNotFound(err) {
			t.Errorf("helper get for %s: %+v, %v; want credentials not found", server, got, err)
		}
	}

	// A real client pulling from the registry asks the helper, is told there is nothing,
	// and goes anonymous (refused: the registry wants a password).
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Image(r, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err == nil {
		t.Error("pulled without credentials from a registry that requires them")
	}
	if reg.SawPassword(hubPassword) {
		t.Errorf("the Docker Hub password was sent to %s", host)
	}
}
