//go:build unix

package proxyplugin

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplug/kplug/httpsig"
)

// TestProxyPluginSignsWithAWSDerivedKey: proxy-plugin --sign rfc9421
// --sign-key-derivation aws signs with a key derived from the AWS credentials in the
// environment through SigV4's ladder, under the SigV4 credential scope as keyid, and
// covers the session token; an API server that derives the same key from its copy of
// the secret (as a resolver would) verifies what arrives.
func TestProxyPluginSignsWithAWSDerivedKey(t *testing.T) {
	for _, token := range []string{"", "session-token-1"} {
		t.Run(fmt.Sprintf("session token %q", token), func(t *testing.T) {
			t.Setenv("AWS_ACCESS_KEY_ID", "AKIDDERIVED")
			t.Setenv("AWS_SECRET_ACCESS_KEY", "derived-secret")
			t.Setenv("AWS_SESSION_TOKEN", token)
			t.Setenv("AWS_PROFILE", "")
			t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
			t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
			policy := httpsig.Policy{RequiredHeaders: map[string][]string{httpsig.AudienceHeader: {"cluster-1"}}}
			scope := map[string]string{"region": "eu-west-1", "service": "eks"}
			var mu sync.Mutex
			var keyIDs []string
			api, last := recordingAPI(t, func(r *http.Request, _ []byte) error {
				sig, err := httpsig.Verify(r, policy, func(s *httpsig.Signature) (any, error) {
					l := httpsig.SigV4Ladder()
					key, want, err := l.Derive("AKIDDERIVED", []byte("derived-secret"), s.Created, scope)
					if err != nil || s.KeyID != want {
						return nil, errors.New("not the derived key's keyid")
					}
					return key, nil
				})
				if err == nil {
					mu.Lock()
					keyIDs = append(keyIDs, sig.KeyID)
					mu.Unlock()
					if token != "" && !strings.Contains(r.Header.Get("Signature-Input"), `"x-amz-security-token"`) {
						err = errors.New("the session token is not covered")
					}
				}
				return err
			})
			sign := signOptions{scheme: "rfc9421", derivation: "aws", service: "eks", region: "eu-west-1", signAudience: "cluster-1", awsTimeout: 10 * time.Second}
			send := serveProxyPlugin(t, api, "", &Options{sign: sign})
			for range 2 {
				if status := send("GET /api/v1/namespaces HTTP/1.1\r\nHost: h\r\n\r\n", false); !strings.HasPrefix(status, "200 ") {
					t.Fatalf("answered %q; the API server said %v", status, last().err)
				}
			}
			if got := last().header.Get("X-Amz-Security-Token"); got != token {
				t.Errorf("X-Amz-Security-Token arrived as %q, want %q", got, token)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(keyIDs) != 2 || !strings.HasPrefix(keyIDs[0], "AKIDDERIVED/") || !strings.HasSuffix(keyIDs[0], "/eu-west-1/eks/aws4_request") {
				t.Errorf("keyids %q, want AKIDDERIVED/<day>/eu-west-1/eks/aws4_request", keyIDs)
			}
		})
	}
}
