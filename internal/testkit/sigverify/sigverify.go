// Package sigverify checks the SigV4 signatures that execproxy/sigv4 makes, with code that
// shares nothing with the signer: the signature is recomputed by aws-sdk-go-v2's signer.
// Tests use it as the receiving side (unit tests, and the verifying front proxy of the
// end-to-end tests). KEP-6308 signatures are verified by httpsig.Verify, and checked
// independently by an npm RFC 9421 implementation (test/interop).
//
// Besides the cryptography, SigV4 applies a receiver's policy: the request target is
// covered, the body matches its signed hash, and every identity-bearing header that is
// present (Impersonate-*, Content-Type) is signed, so that an intermediary cannot add one.
package sigverify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsv4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// MaxSkew is how far a signature's time may be from the verifier's clock.
const MaxSkew = 5 * time.Minute

// isStream reports whether r opens a stream whose payload may be unsigned.
func isStream(r *http.Request) bool {
	return r.Header.Get("Upgrade") != "" || r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("follow") == "true"
}

// SigV4 verifies an AWS Signature Version 4 Authorization header for service and region,
// with the secret lookup returns for the access key, and returns that access key ID.
func SigV4(r *http.Request, body []byte, service, region string, lookup func(accessKeyID string) (aws.Credentials, bool), now time.Time) (string, error) {
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", errors.New("no SigV4 Authorization header")
	}
	var credential string
	var signed []string
	for _, part := range strings.Split(rest, ", ") {
		if v, ok := strings.CutPrefix(part, "Credential="); ok {
			credential = v
		}
		if v, ok := strings.CutPrefix(part, "SignedHeaders="); ok {
			signed = strings.Split(v, ";")
		}
	}
	scope := strings.Split(credential, "/")
	if len(scope) != 5 || scope[2] != region || scope[3] != service || scope[4] != "aws4_request" {
		return "", fmt.Errorf("credential scope %q is not for %s in %s", credential, service, region)
	}
	creds, ok := lookup(scope[0])
	if !ok {
		return "", fmt.Errorf("unknown access key %q", scope[0])
	}
	isSigned := map[string]bool{}
	for _, h := range signed {
		isSigned[h] = true
	}
	for name := range r.Header {
		l := strings.ToLower(name)
		if (strings.HasPrefix(l, "impersonate-") || strings.HasPrefix(l, "x-amz-") || l == "content-type") && !isSigned[l] {
			return "", fmt.Errorf("%s is present but not signed", l)
		}
	}
	if !isSigned["host"] {
		return "", errors.New("host is not signed")
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "UNSIGNED-PAYLOAD" {
		if !isStream(r) {
			return "", errors.New("unsigned payload on a request that is not a stream")
		}
	} else if sum := sha256.Sum256(body); payload != hex.EncodeToString(sum[:]) {
		return "", errors.New("payload hash does not match the body")
	}
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "", fmt.Errorf("X-Amz-Date: %w", err)
	}
	if when.Sub(now).Abs() > MaxSkew {
		return "", fmt.Errorf("signed at %s, too far from now", when)
	}
	again, err := http.NewRequestWithContext(context.Background(), r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	if err != nil {
		return "", err
	}
	for _, h := range signed {
		if h != "host" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	if err := awsv4.NewSigner().SignHTTP(context.Background(), creds, again, payload, service, region, when); err != nil {
		return "", err
	}
	if want := again.Header.Get("Authorization"); want != auth {
		return "", errors.New("signature mismatch")
	}
	return scope[0], nil
}
