// Package sigverify checks the request signatures that execproxy/modify makes, with code
// that shares nothing with the signers: SigV4 is recomputed by aws-sdk-go-v2's signer and
// RFC 9421 structured fields are parsed by a third-party RFC 8941 parser. Tests use it as
// the receiving side (unit tests, and the verifying front proxy of the end-to-end tests).
//
// Besides the cryptography, each verifier applies a receiver's policy: the request target
// is covered, the body matches its signed hash, and every identity-bearing header that is
// present (Impersonate-*, Content-Type, and Authorization for RFC 9421) is covered, so that
// an intermediary cannot add one.
package sigverify

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsv4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/dunglas/httpsfv"
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
	again, err := http.NewRequestWithContext(context.Background(), r.Method, "http://"+r.Host+r.URL.RequestURI(), nil) //nolint:gosec // never sent: only signed again
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

// HTTPSig verifies the RFC 9421 signature labelled label, with the public key lookup
// returns for its keyid, and returns the keyid.
func HTTPSig(r *http.Request, body []byte, label string, lookup func(keyID string) (crypto.PublicKey, bool), now time.Time) (string, error) {
	inputs, err := httpsfv.UnmarshalDictionary(r.Header.Values("Signature-Input"))
	if err != nil {
		return "", fmt.Errorf("signature-input header: %w", err)
	}
	sigs, err := httpsfv.UnmarshalDictionary(r.Header.Values("Signature"))
	if err != nil {
		return "", fmt.Errorf("signature header: %w", err)
	}
	in, ok1 := inputs.Get(label)
	sigMember, ok2 := sigs.Get(label)
	list, ok3 := in.(httpsfv.InnerList)
	sigItem, ok4 := sigMember.(httpsfv.Item)
	sig, ok5 := sigItem.Value.([]byte)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return "", fmt.Errorf("no well-formed signature labelled %q", label)
	}
	covered := map[string]bool{}
	var base strings.Builder
	for _, item := range list.Items {
		name, _ := item.Value.(string)
		covered[name] = true
		var value string
		switch name {
		case "@method":
			value = r.Method
		case "@authority":
			// Lower case and without the default port (RFC 9421 §2.2.3, RFC 9110 §4.2.3).
			defaultPort := ":80"
			if r.TLS != nil {
				defaultPort = ":443"
			}
			value = strings.TrimSuffix(strings.ToLower(r.Host), defaultPort)
		case "@path":
			value = r.URL.EscapedPath()
		case "@query":
			value = "?" + r.URL.RawQuery
		default:
			if strings.HasPrefix(name, "@") {
				return "", fmt.Errorf("derived component %s is not supported", name)
			}
			vs := r.Header.Values(name)
			if len(vs) == 0 {
				return "", fmt.Errorf("covered header %s is missing", name)
			}
			value = strings.Join(vs, ", ")
		}
		fmt.Fprintf(&base, "%q: %s\n", name, value)
	}
	params, err := httpsfv.Marshal(httpsfv.List{list})
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&base, "%q: %s", "@signature-params", params)

	for _, want := range []string{"@method", "@authority", "@path", "@query"} {
		if !covered[want] {
			return "", fmt.Errorf("%s is not covered", want)
		}
	}
	for name := range r.Header {
		l := strings.ToLower(name)
		if (strings.HasPrefix(l, "impersonate-") || l == "authorization" || l == "content-type") && !covered[l] {
			return "", fmt.Errorf("%s is present but not covered", l)
		}
	}
	if len(body) > 0 && !isStream(r) {
		sum := sha256.Sum256(body)
		if !covered["content-digest"] || r.Header.Get("Content-Digest") != "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":" {
			return "", errors.New("body does not match a covered content-digest")
		}
	}
	created, _ := list.Params.Get("created")
	if c, ok := created.(int64); !ok || time.Unix(c, 0).Sub(now).Abs() > MaxSkew {
		return "", fmt.Errorf("created %v is not now", created)
	}
	keyIDParam, _ := list.Params.Get("keyid")
	keyID, _ := keyIDParam.(string)
	pub, ok := lookup(keyID)
	if !ok {
		return "", fmt.Errorf("unknown keyid %q", keyID)
	}
	msg := []byte(base.String())
	switch k := pub.(type) {
	case ed25519.PublicKey:
		if !ed25519.Verify(k, msg, sig) {
			return "", errors.New("bad signature")
		}
	case *ecdsa.PublicKey:
		digest := sha256.Sum256(msg)
		if len(sig) != 64 || !ecdsa.Verify(k, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			return "", errors.New("bad signature")
		}
	default:
		return "", fmt.Errorf("unsupported public key %T", pub)
	}
	return keyID, nil
}
