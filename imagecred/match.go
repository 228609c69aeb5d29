package imagecred

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

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
// is case-sensitive. An error means either side is not a valid URL once "https://" is put
// in front, or the glob holds a malformed character class.
func MatchImage(glob, target string) (bool, error) {
	g, err := parseLocation(glob)
	if err != nil {
		return false, err
	}
	t, err := parseLocation(target)
	if err != nil {
		return false, err
	}
	return g.match(t)
}

// location is a pattern or an image split the way the kubelet compares them; parsing once
// and matching many times is what keeps lookups cheap.
type location struct {
	labels []string
	port   string
	path   string
}

func parseLocation(s string) (location, error) {
	u, err := url.Parse("https://" + s)
	if err != nil {
		return location{}, err
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return location{labels: strings.Split(host, "."), port: port, path: u.Path}, nil
}

// match reports whether target matches l used as a glob.
func (l location) match(target location) (bool, error) {
	if l.port != target.port || len(l.labels) != len(target.labels) || !strings.HasPrefix(target.path, l.path) {
		return false, nil
	}
	for i, label := range l.labels {
		ok, err := filepath.Match(label, target.labels[i])
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// registryOf is the cache key of cacheKeyType Registry: everything before the first slash,
// port included.
func registryOf(image string) string {
	registry, _, _ := strings.Cut(image, "/")
	return registry
}

// isDockerHub reports whether the kubelet would fall back to index.docker.io credentials
// for repo. The kubelet only asks this of normalised repositories, whose first component
// is the registry host, and falls back when that host is docker.io or index.docker.io or
// has neither '.' nor ':' (localhost, in practice). A repo without '/' is a bare registry
// host, as docker credential helpers are given, and is decided by the same rule on the
// host: "registry:5000" is not Docker Hub. (The kubelet's own check would say a single
// component is Docker Hub, but it never sees one: every normalised name has a host.)
func isDockerHub(repo string) bool {
	switch host := registryOf(repo); host {
	case "":
		return false
	case "docker.io", "index.docker.io":
		return true
	default:
		return !strings.ContainsAny(host, ".:")
	}
}

// locationCache remembers parsed auth keys and images. Both come from a small set in
// practice (registries, repositories), and parsing them dominated cache-hit lookups. It
// stops growing at maxCachedLocations, so hostile plugin output cannot grow it without bound.
type locationCache struct {
	m        sync.Map // string -> parsedLocation
	authKeys sync.Map // auth key with scheme -> normalised key, "" when it does not parse
	n        atomic.Int64
}

type parsedLocation struct {
	loc location
	err error
}

const maxCachedLocations = 4096

func (c *locationCache) parse(s string) (location, error) {
	if v, ok := c.m.Load(s); ok {
		p := v.(parsedLocation)
		return p.loc, p.err
	}
	loc, err := parseLocation(s)
	if c.n.Load() < maxCachedLocations {
		if _, loaded := c.m.LoadOrStore(s, parsedLocation{loc, err}); !loaded {
			c.n.Add(1)
		}
	}
	return loc, err
}

func (c *locationCache) rememberKey(loc, key string) {
	if c.n.Load() < maxCachedLocations {
		if _, loaded := c.authKeys.LoadOrStore(loc, key); !loaded {
			c.n.Add(1)
		}
	}
}
