package modify_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsv4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go/aws-http-auth/credentials"

	"github.com/kplug/kplug/execproxy/modify"
)

var testCreds = credentials.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "test-secret", SessionToken: "test-session"}

// verifySigV4 checks a request the way an AWS service would, but with a second
// implementation: aws-sdk-go-v2's signer recomputes the Authorization header from what the
// server received. It also insists that every identity-bearing header is signed.
func verifySigV4(r *http.Request, body []byte) error {
	auth := r.Header.Get("Authorization")
	const prefix = "AWS4-HMAC-SHA256 Credential="
	if !strings.HasPrefix(auth, prefix) {
		return fmt.Errorf("no SigV4 Authorization header: %q", auth)
	}
	var signed []string
	for _, part := range strings.Split(auth, ", ") {
		if v, ok := strings.CutPrefix(part, "SignedHeaders="); ok {
			signed = strings.Split(v, ";")
		}
	}
	isSigned := map[string]bool{}
	for _, h := range signed {
		isSigned[h] = true
	}
	for name := range r.Header {
		l := strings.ToLower(name)
		if (strings.HasPrefix(l, "impersonate-") || strings.HasPrefix(l, "x-amz-") || l == "content-type") && !isSigned[l] {
			return fmt.Errorf("%s is present but not signed", l)
		}
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "UNSIGNED-PAYLOAD" {
		if r.Header.Get("Connection") == "" && r.URL.Query().Get("watch") != "true" {
			return errors.New("unsigned payload on a request that is not a stream")
		}
	} else if sum := sha256.Sum256(body); payload != hex.EncodeToString(sum[:]) {
		return errors.New("payload hash does not match the body")
	}
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return err
	}
	again, _ := http.NewRequestWithContext(context.Background(), r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	for _, h := range signed {
		if h != "host" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	creds := aws.Credentials{AccessKeyID: testCreds.AccessKeyID, SecretAccessKey: testCreds.SecretAccessKey, SessionToken: testCreds.SessionToken}
	if err := awsv4.NewSigner().SignHTTP(context.Background(), creds, again, payload, "eks", "eu-west-1", when); err != nil {
		return err
	}
	if want := again.Header.Get("Authorization"); want != auth {
		return fmt.Errorf("signature mismatch:\n got %s\nwant %s", auth, want)
	}
	return nil
}

func sigv4Client(t *testing.T, tamper func(*http.Request)) *http.Client {
	t.Helper()
	sign, err := modify.NewSigV4(modify.SigV4Options{
		Service: "eks", Region: "eu-west-1",
		Credentials: func(context.Context) (credentials.Credentials, error) { return testCreds, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: modifying{modify: sign, tamper: tamper, base: http.DefaultTransport}}
}

func TestSigV4VerifiedBySecondImplementation(t *testing.T) {
	srv := verifyingServer(t, verifySigV4)
	c := sigv4Client(t, nil)
	for _, tt := range []struct {
		name, method, path, body string
		header                   http.Header
	}{
		{"get", "GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb&limit=5", "", nil},
		{"create with impersonation", "POST", "/api/v1/namespaces/default/configmaps", `{"kind":"ConfigMap"}`,
			header("Content-Type", "application/json", "Impersonate-User", "alice", "Impersonate-Group", "developers",
				"Impersonate-Group", "testers", "Impersonate-Extra-Scopes", "view")},
		{"watch", "GET", "/api/v1/pods?watch=true&resourceVersion=10", "", nil},
		{"upgrade", "POST", "/api/v1/namespaces/default/pods/web/exec?command=sh&stdin=true", "",
			header("Connection", "Upgrade", "Upgrade", "SPDY/3.1", "X-Stream-Protocol-Version", "v5.channel.k8s.io",
				"X-Stream-Protocol-Version", "v4.channel.k8s.io")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := send(t, c, tt.method, srv.URL+tt.path, tt.body, tt.header)
			if err != nil || got != "ok" {
				t.Errorf("verifier: %q, %v", got, err)
			}
		})
	}
}

func TestSigV4TamperingIsRejected(t *testing.T) {
	srv := verifyingServer(t, verifySigV4)
	impersonating := header("Impersonate-User", "alice", "Content-Type", "application/json")
	for _, tt := range []struct {
		name   string
		tamper func(*http.Request)
		want   string
	}{
		{"impersonation added after signing", func(r *http.Request) { r.Header.Set("Impersonate-Group", "system:masters") },
			"impersonate-group is present but not signed"},
		{"impersonated user changed", func(r *http.Request) { r.Header.Set("Impersonate-User", "admin") }, "signature mismatch"},
		{"body changed", func(r *http.Request) {
			r.Body, r.GetBody = readCloser(`{"kind":"Secret!!!"}`), nil // same length
		}, "payload hash does not match the body"},
		{"path changed", func(r *http.Request) { r.URL.Path = "/api/v1/namespaces/kube-system/configmaps" }, "signature mismatch"},
		{"signed as a stream", func(r *http.Request) { r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD") }, "unsigned payload on a request that is not a stream"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := send(t, sigv4Client(t, tt.tamper), "POST", srv.URL+"/api/v1/namespaces/default/configmaps", `{"kind":"ConfigMap"}`, impersonating)
			if err != nil || !strings.HasPrefix(got, tt.want) {
				t.Errorf("verifier: %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestSigV4RefusesToReplaceAuthorization(t *testing.T) {
	srv := verifyingServer(t, verifySigV4)
	_, err := send(t, sigv4Client(t, nil), "GET", srv.URL+"/api", "", header("Authorization", "Bearer abc"))
	if err == nil || !strings.Contains(err.Error(), "sigv4: the request already has an Authorization header") {
		t.Errorf("err = %v", err)
	}
}

func TestSigV4Options(t *testing.T) {
	creds := func(context.Context) (credentials.Credentials, error) { return testCreds, nil }
	for _, tt := range []struct {
		o    modify.SigV4Options
		want string
	}{
		{modify.SigV4Options{Region: "r", Credentials: creds}, "sigv4: no service name to sign for"},
		{modify.SigV4Options{Service: "s", Credentials: creds}, "sigv4: no region to sign for"},
		{modify.SigV4Options{Service: "s", Region: "r"}, "sigv4: no credentials"},
	} {
		if _, err := modify.NewSigV4(tt.o); err == nil || err.Error() != tt.want {
			t.Errorf("NewSigV4(%+v) = %v, want %q", tt.o, err, tt.want)
		}
	}
}
