package imagecred

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// DockerConfigJSON renders credentials as a docker config.json document,
// {"auths":{KEY:{"username","password","auth"}}}, with the keys in the order of creds (the
// order the kubelet tries them, as Lookup returns them) and the first credential of each
// key winning. The result holds secrets.
func DockerConfigJSON(creds []Credential) []byte {
	var b bytes.Buffer
	b.WriteString(`{"auths":{`)
	seen := map[string]bool{}
	for _, c := range creds {
		if seen[c.Key] {
			continue
		}
		if len(seen) > 0 {
			b.WriteByte(',')
		}
		seen[c.Key] = true
		key, _ := json.Marshal(c.Key)
		entry, _ := json.Marshal(struct { //nolint:gosec // rendering the credentials is the point
			Username string `json:"username"`
			Password string `json:"password"`
			Auth     string `json:"auth"`
		}{c.Username, c.Password, base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + c.Password))})
		b.Write(key)
		b.WriteByte(':')
		b.Write(entry)
	}
	b.WriteString("}}\n")
	return b.Bytes()
}

// CredentialsNotFoundError is DockerHelperGet's error when no provider had credentials.
// Its message is the docker-credential-helpers protocol's, which clients match verbatim;
// Err holds the providers' failures, nil if none failed.
type CredentialsNotFoundError struct {
	Err error
}

func (e *CredentialsNotFoundError) Error() string { return "credentials not found in native keychain" }

func (e *CredentialsNotFoundError) Unwrap() error { return e.Err }

// DockerHelperGet answers the "get" of the docker-credential-helpers protocol, so that
// docker, containerd, crane or skopeo can use provider plugins: it reads a server URL on in
// (a host, "registry:5000", "https://index.docker.io/v1/"), looks it up as the kubelet looks
// up an image of that registry (see LookupRepository; no pod is known, so providers that
// require a service account fail and optional ones run without a token), and writes
// {"ServerURL","Username","Secret"} with the first credential to out. With none, it writes
// the protocol's not-found message to out and returns a *CredentialsNotFoundError.
func (k *Keyring) DockerHelperGet(ctx context.Context, in io.Reader, out io.Writer) error {
	line, err := bufio.NewReader(io.LimitReader(in, 64<<10)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read server URL from stdin: %w", err)
	}
	serverURL := strings.TrimSpace(line)
	if serverURL == "" {
		return errors.New("no server URL on stdin")
	}
	creds, err := k.LookupRepository(ctx, helperRepository(serverURL), nil)
	if len(creds) == 0 {
		notFound := &CredentialsNotFoundError{Err: err}
		_, _ = fmt.Fprintln(out, notFound.Error())
		return notFound
	}
	return json.NewEncoder(out).Encode(struct { //nolint:gosec // the helper protocol returns the secret
		ServerURL string
		Username  string
		Secret    string
	}{serverURL, creds[0].Username, creds[0].Password})
}

// helperRepository turns what a client passes a credential helper (a host, a URL such as
// https://index.docker.io/v1/) into the repository string providers match against.
func helperRepository(serverURL string) string {
	s := serverURL
	for _, scheme := range []string{"https://", "http://"} {
		s = strings.TrimPrefix(s, scheme)
	}
	host, path, _ := strings.Cut(s, "/")
	path = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(path, "v1/"), "v2/"), "/")
	if path == "v1" || path == "v2" {
		path = ""
	}
	switch host {
	case "index.docker.io", "registry-1.docker.io":
		host = "docker.io"
	}
	if path == "" {
		return host
	}
	return host + "/" + path
}

// CacheLister is a Cache whose entries can be listed, for the helper protocol's "list":
// DirCache is one.
type CacheLister interface {
	Entries() ([]CacheEntry, error)
}

// DockerHelperList answers the "list" of the docker-credential-helpers protocol, as the
// read-only helpers of cloud registries do: it writes {SERVER:USERNAME} for the credentials
// a cache holds now (unexpired entries of c), which a "get" for that server answers without
// running a plugin. An auth key with a wildcard ("*.registry.io") names no server and is
// left out; when two entries name one server, the one that expires last wins. With a nil c
// (no cache) the list is empty, "{}": kplug stores nothing of its own, and docker build,
// which lists a credsStore's servers, must not fail for it.
func DockerHelperList(c CacheLister, now time.Time, out io.Writer) error {
	servers := map[string]string{}
	if c != nil {
		entries, err := c.Entries()
		if err != nil {
			return fmt.Errorf("list cached credentials: %w", err)
		}
		expires := map[string]time.Time{}
		for _, e := range entries {
			if e.expired(now) {
				continue
			}
			for _, key := range slices.Sorted(maps.Keys(e.Auth)) {
				if strings.ContainsAny(key, "*?[") || e.Auth[key].Username == "" {
					continue
				}
				if last, ok := expires[key]; ok && !e.ExpiresAt.After(last) {
					continue
				}
				servers[key], expires[key] = e.Auth[key].Username, e.ExpiresAt
			}
		}
	}
	return json.NewEncoder(out).Encode(servers)
}

// ErrHelperReadOnly is the answer to the protocol's "store" and "erase": a helper backed by
// provider plugins has nothing to store credentials in, and erasing what a plugin returns
// would only make it run again.
var ErrHelperReadOnly = errors.New("this credential helper is read-only: its credentials come from kubelet credential provider plugins")

// DockerHelperReadOnly answers the protocol's "store" or "erase" (action): it reads what
// the client sent (at most 64 KiB, discarded: a store carries a secret), writes the
// refusal to out, where the protocol's clients read a helper's error, and returns it,
// wrapping ErrHelperReadOnly.
func DockerHelperReadOnly(action string, in io.Reader, out io.Writer) error {
	_, _ = io.Copy(io.Discard, io.LimitReader(in, 64<<10))
	err := fmt.Errorf("%q is not supported: %w", action, ErrHelperReadOnly)
	_, _ = fmt.Fprintln(out, err.Error())
	return err
}
