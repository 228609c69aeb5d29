package sigv4_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/aws-http-auth/credentials"

	"github.com/kplug/kplug/execproxy/sigv4"
	"github.com/kplug/kplug/internal/testkit/sigverify"
)

var testCreds = credentials.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "test-secret", SessionToken: "test-session"}

// verifySigV4 checks a request as an AWS service would, with a second implementation.
func verifySigV4(r *http.Request, body []byte) error {
	lookup := func(id string) (aws.Credentials, bool) {
		return aws.Credentials{AccessKeyID: id, SecretAccessKey: testCreds.SecretAccessKey, SessionToken: testCreds.SessionToken}, id == testCreds.AccessKeyID
	}
	_, err := sigverify.SigV4(r, body, "eks", "eu-west-1", lookup, time.Now())
	return err
}

func sigv4Client(t *testing.T, tamper func(*http.Request)) *http.Client {
	t.Helper()
	sign, err := sigv4.New(sigv4.Options{
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
		o    sigv4.Options
		want string
	}{
		{sigv4.Options{Region: "r", Credentials: creds}, "sigv4: no service name to sign for"},
		{sigv4.Options{Service: "s", Credentials: creds}, "sigv4: no region to sign for"},
		{sigv4.Options{Service: "s", Region: "r"}, "sigv4: no credentials"},
	} {
		if _, err := sigv4.New(tt.o); err == nil || err.Error() != tt.want {
			t.Errorf("New(%+v) = %v, want %q", tt.o, err, tt.want)
		}
	}
}

func TestRedactAWSError(t *testing.T) {
	for _, msg := range []string{
		`credential process error: parse failed of process output: {"Version":1,"AccessKeyId":"AKIDEXAMPLE","SecretAccessKey":"TOPSECRET/KEY+1","SessionToken":"SESSIONTOK","Expiration":"2030-01-01 00:00:00"}`,
		"failed to load profile: aws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = TOPSECRET/KEY+1\naws_session_token=SESSIONTOK",
		"{AccessKeyID:AKIDEXAMPLE SecretAccessKey:TOPSECRET/KEY+1 SessionToken:SESSIONTOK}",
	} {
		got := sigv4.RedactError(errors.New(msg)).Error()
		if strings.Contains(got, "TOPSECRET") || strings.Contains(got, "SESSIONTOK") {
			t.Errorf("a secret is left in %q", got)
		}
		if !strings.Contains(got, "<redacted>") || !strings.Contains(got, "AKIDEXAMPLE") {
			t.Errorf("RedactError(%q) = %q: want the secrets redacted and the rest kept", msg, got)
		}
	}
	if sigv4.RedactError(nil) != nil {
		t.Error("RedactError(nil) is not nil")
	}
}
