package sigv4

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/smithy-go/aws-http-auth/credentials"
	awssigv4 "github.com/aws/smithy-go/aws-http-auth/sigv4"
	v4 "github.com/aws/smithy-go/aws-http-auth/v4"
)

// Options configure New.
type Options struct {
	// Service and Region form the credential scope, e.g. "eks" and "eu-west-1". Required.
	Service, Region string
	// Credentials returns the AWS credentials to sign with; it is called for every request,
	// so it should cache (aws-sdk-go-v2's aws.CredentialsCache does). Required.
	Credentials func(context.Context) (credentials.Credentials, error)
	// Now is the signing clock; nil means time.Now.
	Now func() time.Time
}

// New returns a request modifier that signs each request with AWS Signature Version 4
// in the Authorization header. Besides Host and X-Amz-*, it signs every header that
// protectedHeader names when present (Impersonate-*, X-Remote-*, Content-Type, the
// subprotocol headers of upgrades). Bodies of up to MaxSignedBody bytes are hashed;
// streaming requests (upgrades, watches, followed logs) and larger bodies are signed with
// the UNSIGNED-PAYLOAD sentinel. A request that already has an Authorization header is
// refused, because the signature would silently replace that credential.
//
// The modifier is safe for concurrent use.
func New(o Options) (func(*http.Request) error, error) {
	switch {
	case o.Service == "":
		return nil, errors.New("sigv4: no service name to sign for")
	case o.Region == "":
		return nil, errors.New("sigv4: no region to sign for")
	case o.Credentials == nil:
		return nil, errors.New("sigv4: no credentials")
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	signer := awssigv4.New(func(so *v4.SignerOptions) {
		so.HeaderRules = sigv4Headers{}
		so.DisableImplicitPayloadHashing = true
		so.AddPayloadHashHeader = true // tells the verifier which payload hash was signed
	})
	return func(req *http.Request) error {
		if req.Header.Get("Authorization") != "" {
			return errors.New("sigv4: the request already has an Authorization header, which the signature would replace; remove the client's own credential")
		}
		creds, err := o.Credentials(req.Context())
		if err != nil {
			return fmt.Errorf("sigv4: AWS credentials: %w", RedactError(err))
		}
		body, signed, err := bufferBody(req)
		if err != nil {
			return fmt.Errorf("sigv4: %w", err)
		}
		hash := v4.UnsignedPayload()
		if signed {
			sum := sha256.Sum256(body)
			hash = sum[:]
		}
		err = signer.SignRequest(&awssigv4.SignRequestInput{
			Request:     req,
			PayloadHash: hash,
			Credentials: creds,
			Service:     o.Service,
			Region:      o.Region,
			Time:        now(),
		})
		if err != nil {
			return fmt.Errorf("sigv4: %w", err)
		}
		return nil
	}, nil
}

// sigv4Headers decides which headers SigV4 covers (names arrive lowercase).
type sigv4Headers struct{}

func (sigv4Headers) IsSigned(name string) bool {
	return name == "host" || strings.HasPrefix(name, "x-amz-") || (protectedHeader(name) && name != "authorization")
}
