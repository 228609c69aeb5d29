package httpsig_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsv4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go/aws-http-auth/credentials"
	"github.com/aws/smithy-go/logging"

	"github.com/kplug/kplug/execproxy/sigv4"
	"github.com/kplug/kplug/httpsig"
)

// An AWS session credential (the ASIA access key of an assumed role): the session token is
// signed over, and plays no part in the signing key.
var oracleCreds = aws.Credentials{
	AccessKeyID:     "ASIAIOSFODNN7EXAMPLE",
	SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
	SessionToken:    "session-token-example",
}

// sigv4Auth is a SigV4 Authorization header's parts.
type sigv4Auth struct {
	credential, signedHeaders, signature string
}

func parseSigV4Auth(t *testing.T, auth string) sigv4Auth {
	t.Helper()
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		t.Fatalf("Authorization %q is not SigV4", auth)
	}
	var a sigv4Auth
	for part := range strings.SplitSeq(rest, ", ") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "Credential":
			a.credential = v
		case "SignedHeaders":
			a.signedHeaders = v
		case "Signature":
			a.signature = v
		}
	}
	if a.credential == "" || a.signedHeaders == "" || a.signature == "" {
		t.Fatalf("Authorization %q lacks Credential, SignedHeaders or Signature", auth)
	}
	return a
}

// sdkSign signs req with aws-sdk-go-v2's v4 signer at when, and returns the string to sign
// the signer logs (LogSigning): what the signing key HMACs into the signature.
func sdkSign(t *testing.T, req *http.Request, payloadHash, service, region string, when time.Time) string {
	t.Helper()
	var stringToSign string
	s := awsv4.NewSigner(func(o *awsv4.SignerOptions) {
		o.LogSigning = true
		o.Logger = logging.LoggerFunc(func(_ logging.Classification, _ string, v ...any) {
			// The log message's arguments: the canonical request, the string to sign, and
			// the presigned URL (empty here).
			if len(v) >= 2 {
				stringToSign, _ = v[1].(string)
			}
		})
	})
	if err := s.SignHTTP(t.Context(), oracleCreds, req, payloadHash, service, region, when); err != nil {
		t.Fatal(err)
	}
	if stringToSign == "" {
		t.Fatal("the SDK's signer logged no string to sign")
	}
	return stringToSign
}

// TestSigV4LadderMatchesSigners: the key SigV4Ladder derives is the signing key of AWS
// Signature Version 4 as two signers nobody here wrote compute it: aws-sdk-go-v2's v4
// signer, and the smithy aws-http-auth signer kplug's own SigV4 signer (execproxy/sigv4)
// is built on. For each, the string to sign (from the SDK's signing log) HMACed with the
// ladder's key for the request's time gives the Authorization header's Signature, and the
// ladder's key ID is its credential scope. The instants straddle midnight UTC, where only
// the date step tells the keys apart.
func TestSigV4LadderMatchesSigners(t *testing.T) {
	t.Parallel()
	ladder := httpsig.SigV4Ladder()
	const service, region = "eks", "us-west-2"
	scope := map[string]string{"region": region, "service": service}
	for _, when := range []time.Time{
		time.Date(2026, 11, 27, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC),
		time.Date(2028, 2, 29, 13, 7, 11, 0, time.FixedZone("UTC+9", 9*3600)), // 04:07 UTC
	} {
		key, keyID, err := ladder.Derive(oracleCreds.AccessKeyID, []byte(oracleCreds.SecretAccessKey), when, scope)
		if err != nil {
			t.Fatal(err)
		}
		sign := func(stringToSign string) string {
			m := hmac.New(sha256.New, key)
			m.Write([]byte(stringToSign))
			return hex.EncodeToString(m.Sum(nil))
		}
		checkAuth := func(t *testing.T, auth, stringToSign string) {
			t.Helper()
			a := parseSigV4Auth(t, auth)
			if a.credential != keyID {
				t.Errorf("credential scope %q, ladder key ID %q", a.credential, keyID)
			}
			if got := sign(stringToSign); got != a.signature {
				t.Errorf("the ladder's key signs %q as %s; the Authorization header has %s", stringToSign, got, a.signature)
			}
		}
		name := when.UTC().Format(time.RFC3339)

		t.Run(name+"/aws-sdk-go-v2", func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "https://eks.example/api/v1/namespaces/default/pods?limit=500", nil)
			req.Header.Set("Impersonate-User", "alice")
			sum := sha256.Sum256(nil)
			stringToSign := sdkSign(t, req, hex.EncodeToString(sum[:]), service, region, when)
			checkAuth(t, req.Header.Get("Authorization"), stringToSign)
		})

		t.Run(name+"/execproxy-sigv4", func(t *testing.T) {
			signReq, err := sigv4.New(sigv4.Options{
				Service: service, Region: region, Now: func() time.Time { return when },
				Credentials: func(context.Context) (credentials.Credentials, error) {
					return credentials.Credentials{AccessKeyID: oracleCreds.AccessKeyID, SecretAccessKey: oracleCreds.SecretAccessKey, SessionToken: oracleCreds.SessionToken}, nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			body := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"}}`
			req, _ := http.NewRequest(http.MethodPost, "https://eks.example/api/v1/namespaces/default/configmaps?dryRun=All", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if err := signReq(req); err != nil {
				t.Fatal(err)
			}
			// The SDK re-signs the same request (the headers kplug signed, its payload
			// hash, its time): the same Authorization means the string to sign it logs is
			// the one kplug's signer HMACed.
			again, _ := http.NewRequest(req.Method, req.URL.String(), nil)
			for h := range strings.SplitSeq(parseSigV4Auth(t, req.Header.Get("Authorization")).signedHeaders, ";") {
				if h != "host" {
					again.Header[http.CanonicalHeaderKey(h)] = req.Header.Values(h)
				}
			}
			stringToSign := sdkSign(t, again, req.Header.Get("X-Amz-Content-Sha256"), service, region, when)
			if got, want := again.Header.Get("Authorization"), req.Header.Get("Authorization"); got != want {
				t.Fatalf("the SDK signs kplug's request as\n%s\nkplug signed\n%s", got, want)
			}
			checkAuth(t, req.Header.Get("Authorization"), stringToSign)
		})
	}
}
