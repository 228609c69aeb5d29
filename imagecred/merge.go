package imagecred

import (
	"net/url"
	"slices"
	"sort"
	"strings"
)

// ServiceAccountCoordinates say which service account's token a credential was obtained
// with; the kubelet tracks them for pulled images (KEP-2535).
type ServiceAccountCoordinates struct {
	UID       string
	Namespace string
	Name      string
}

// Credential is one credential for an image, with where it came from.
type Credential struct {
	// Key is the auth key that matched the image, normalised as the kubelet does: scheme
	// and a leading /v1/ or /v2/ removed, e.g. "registry.io" or "registry.io/team".
	Key      string
	Provider string
	AuthConfig
	// ServiceAccount is set when the provider ran with a service-account token.
	ServiceAccount *ServiceAccountCoordinates
}

// dockerHubKey is where credentials for Docker Hub images are found when nothing else matches.
const dockerHubKey = "index.docker.io"

// keyring is the kubelet's BasicDockerKeyring, built for one lookup from the answers of
// every provider asked: credentials indexed by normalised auth key, keys sorted in reverse
// so that longer paths and literal hosts come before wildcards.
type keyring struct {
	locations *locationCache
	index     []string
	parsed    map[string]location // parsed index keys; absent when a key does not parse
	creds     map[string][]Credential
}

// add indexes one provider's answer. Keys that do not parse as URLs are skipped, as the
// kubelet skips them.
func (k *keyring) add(provider string, sa *ServiceAccountCoordinates, auth map[string]AuthConfig) {
	if k.creds == nil {
		k.creds = map[string][]Credential{}
		k.parsed = map[string]location{}
	}
	// The kubelet walks the map in random order; sorting makes equal keys deterministic.
	locs := make([]string, 0, len(auth))
	for loc := range auth {
		locs = append(locs, loc)
	}
	sort.Strings(locs)
	for _, loc := range locs {
		key, ok := k.authKey(loc)
		if !ok {
			continue
		}
		if _, seen := k.creds[key]; !seen {
			k.index = append(k.index, key)
			if l, err := k.locations.parse(key); err == nil {
				k.parsed[key] = l
			}
		}
		k.creds[key] = append(k.creds[key], Credential{Key: key, Provider: provider, AuthConfig: auth[loc], ServiceAccount: sa})
	}
	sort.Sort(sort.Reverse(sort.StringSlice(k.index)))
}

// authKey normalises a key of a response's auth map as docker's ResolveAuthConfig does.
func (k *keyring) authKey(loc string) (string, bool) {
	if !strings.HasPrefix(loc, "https://") && !strings.HasPrefix(loc, "http://") {
		loc = "https://" + loc
	}
	if v, ok := k.locations.authKeys.Load(loc); ok {
		key := v.(string)
		return key, key != ""
	}
	key, ok := authKey(loc)
	k.locations.rememberKey(loc, key)
	return key, ok
}

func authKey(loc string) (string, bool) {
	u, err := url.Parse(loc)
	if err != nil {
		return "", false
	}
	p := u.Path
	if strings.HasPrefix(p, "/v1/") || strings.HasPrefix(p, "/v2/") {
		p = p[3:]
	}
	if p == "" || p == "/" {
		return u.Host, true
	}
	return u.Host + p, true
}

// lookup returns the credentials whose key matches image, most specific key first, or the
// index.docker.io credentials for a Docker Hub image when nothing matches.
func (k *keyring) lookup(image string) []Credential {
	var out []Credential
	if target, err := k.locations.parse(image); err == nil {
		for _, key := range k.index {
			if glob, ok := k.parsed[key]; ok {
				if ok, _ := glob.match(target); ok {
					out = append(out, k.creds[key]...)
				}
			}
		}
	}
	if len(out) == 0 && isDockerHub(image) {
		out = slices.Clone(k.creds[dockerHubKey])
	}
	return out
}
