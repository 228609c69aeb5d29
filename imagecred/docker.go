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
	"strings"
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
