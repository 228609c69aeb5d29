package imagecred

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/distribution/reference"
)

// NormalizeImage turns an image as written in a pod spec into the repository the kubelet
// hands to providers: fully qualified, without tag or digest ("nginx:1.25" becomes
// "docker.io/library/nginx"). matchImages, cache keys and auth keys all use this string.
func NormalizeImage(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("imagecred: invalid image %q: %w", image, err)
	}
	return named.Name(), nil
}

// MatchImage reports whether target (a normalised image, or a registry host) matches the
// glob pattern as the kubelet matches matchImages entries and auth keys: the same port, the
// same number of host labels with each label matched by filepath.Match (so "*.io" does not
// match "a.b.io"), and the glob's path a plain string prefix of the target's path. Matching
// is case-sensitive. An error means the glob holds a malformed character class.
func MatchImage(glob, target string) (bool, error) {
	g, err := url.Parse("https://" + glob)
	if err != nil {
		return false, err
	}
	t, err := url.Parse("https://" + target)
	if err != nil {
		return false, err
	}
	return urlsMatch(g, t)
}

func urlsMatch(glob, target *url.URL) (bool, error) {
	globLabels, globPort := splitHost(glob.Host)
	targetLabels, targetPort := splitHost(target.Host)
	if globPort != targetPort || len(globLabels) != len(targetLabels) {
		return false, nil
	}
	if !strings.HasPrefix(target.Path, glob.Path) {
		return false, nil
	}
	for i, label := range globLabels {
		ok, err := filepath.Match(label, targetLabels[i])
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func splitHost(hostport string) (labels []string, port string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	return strings.Split(host, "."), port
}

// registryOf is the cache key of cacheKeyType Registry: everything before the first slash,
// port included.
func registryOf(image string) string {
	registry, _, _ := strings.Cut(image, "/")
	return registry
}

// isDockerHub reports whether the kubelet would fall back to index.docker.io credentials
// for image: a single path component, an explicit docker.io or index.docker.io host, or a
// first component that cannot be a host (no '.' or ':').
func isDockerHub(image string) bool {
	first, _, found := strings.Cut(image, "/")
	switch {
	case first == "":
		return false
	case !found:
		return true
	case first == "docker.io", first == "index.docker.io":
		return true
	}
	return !strings.ContainsAny(first, ".:")
}
