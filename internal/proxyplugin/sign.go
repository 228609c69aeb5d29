package proxyplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/aws-http-auth/credentials"
	"github.com/spf13/pflag"

	"github.com/kplug/kplug/execproxy/sigv4"
	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/execcache"
	"github.com/kplug/kplug/internal/pemkey"
	"github.com/kplug/kplug/keys"
)

// Environment variables of proxy-plugin; the PIN is read here and never logged.
const (
	PKCS11PINEnv    = "KPLUG_PKCS11_PIN"
	PKCS11ModuleEnv = "KPLUG_PKCS11_MODULE"
	TPMDeviceEnv    = "KPLUG_TPM_DEVICE"
	TPMPINEnv       = "KPLUG_TPM_PIN" // apart from the PKCS#11 PIN, which never goes to a TPM
)

// signOptions are proxy-plugin's request-signing flags.
type signOptions struct {
	scheme       string
	service      string
	region       string
	signKey      string
	signKeyID    string
	signCert     string
	signAudience string
	signHeaders  []string
	derivation   string
	awsTimeout   time.Duration
}

func (o *signOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.scheme, "sign", "", "sign every request: sigv4 (AWS Signature Version 4) or rfc9421 (HTTP Message Signatures)")
	f.StringVar(&o.service, "sigv4-service", "", "--sign sigv4: the service name of the credential scope, e.g. eks")
	f.StringVar(&o.region, "sigv4-region", "", "--sign sigv4: the region of the credential scope (default: the AWS configuration's region)")
	f.StringVar(&o.signKey, "sign-key", "", "--sign rfc9421: the signing key (ECDSA P-256 or P-384, Ed25519, RSA), as a file path (a PEM key or a TPM 2.0 TSS2 key file), a pkcs11: or a tpm: URI")
	f.StringVar(&o.signCert, "sign-cert", "", "--sign rfc9421: the key's certificate (PEM file): the signer's identity, sent in Signature-Certificate; the keyid is its x509-sha256 digest")
	f.StringVar(&o.signKeyID, "sign-key-id", "", "--sign rfc9421: the keyid the verifier knows the key by, when there is no --sign-cert")
	f.StringVar(&o.signAudience, "sign-audience", "", "--sign rfc9421: the X-K8s-Audience value naming the cluster, covered by every signature (required)")
	f.StringVar(&o.derivation, "sign-key-derivation", "", "--sign rfc9421: aws signs with an HMAC key derived from your AWS credentials through SigV4's ladder (AWS4, date, --sigv4-region, --sigv4-service, aws4_request), no token exchange: the keyid is the access key ID and that scope, and X-Amz-Security-Token is covered when there is a session token")
	f.StringArrayVar(&o.signHeaders, "sign-header", nil, "--sign rfc9421: another header to set and cover, as NAME=VALUE or NAME=@FILE (read from FILE, for values that must not appear in argv); repeatable")
	o.awsTimeout = 20 * time.Second
}

// KeyOptions are the options of a key named on the command line, from the environment.
func KeyOptions() keys.Options {
	return keys.Options{PIN: os.Getenv(PKCS11PINEnv), PKCS11Module: os.Getenv(PKCS11ModuleEnv), TPMDevice: os.Getenv(TPMDeviceEnv), TPMPIN: os.Getenv(TPMPINEnv)}
}

// signer builds the --sign modifier, checking at start what it needs (credentials, key),
// and returns what to close when the proxy stops.
func (o *signOptions) signer(ctx context.Context, guard *execcache.Guard) (func(*http.Request) error, io.Closer, error) {
	switch o.scheme {
	case "":
		if o.service != "" || o.region != "" || o.httpSigFlagsSet() {
			return nil, nil, usage(errors.New("--sigv4-* and --sign-* need --sign"))
		}
		return nil, nil, nil
	case "sigv4":
		if o.httpSigFlagsSet() {
			return nil, nil, usage(errors.New("--sign-key, --sign-cert, --sign-key-id, --sign-key-derivation, --sign-audience and --sign-header are for --sign rfc9421"))
		}
		sign, err := o.sigv4(ctx, guard)
		return sign, nil, err
	case "rfc9421":
		if o.derivation != "" {
			sign, err := o.awsDerived(ctx, guard)
			return sign, nil, err
		}
		if o.service != "" || o.region != "" {
			return nil, nil, usage(errors.New("--sigv4-service and --sigv4-region are for --sign sigv4 and --sign-key-derivation aws"))
		}
		signer, closer, err := o.httpSig(guard)
		if err != nil {
			return nil, nil, err
		}
		return signer.Sign, closer, nil
	}
	return nil, nil, usage(fmt.Errorf("--sign %q: want sigv4 or rfc9421", o.scheme))
}

func (o *signOptions) httpSigFlagsSet() bool {
	return o.signKey != "" || o.signKeyID != "" || o.signCert != "" || o.signAudience != "" || len(o.signHeaders) > 0 || o.derivation != ""
}

// signHeaderValues are --sign-audience and --sign-header, checked.
func (o *signOptions) signHeaderValues() (map[string]string, error) {
	if o.signAudience == "" {
		return nil, usage(errors.New("--sign rfc9421 needs --sign-audience, the X-K8s-Audience value naming the cluster (KEP-6308 refuses to sign without one)"))
	}
	headers := map[string]string{httpsig.AudienceHeader: o.signAudience}
	for _, h := range o.signHeaders {
		name, value, err := headerFlag("--sign-header", h)
		if err != nil {
			return nil, err
		}
		if _, dup := headers[http.CanonicalHeaderKey(name)]; dup {
			return nil, usage(fmt.Errorf("--sign-header %s: given twice (or as --sign-audience)", name))
		}
		headers[http.CanonicalHeaderKey(name)] = value
	}
	return headers, nil
}

// awsDerived signs KEP-6308 requests with a key derived from the AWS credentials through
// SigV4's ladder: no token exchange, and the key signs nothing but this service's
// requests of the day. Credentials are loaded as --sign sigv4 loads them; a new signer is
// built when they change (a renewed session), never per request otherwise.
func (o *signOptions) awsDerived(ctx context.Context, guard *execcache.Guard) (func(*http.Request) error, error) {
	switch {
	case o.derivation != "aws":
		return nil, usage(fmt.Errorf("--sign-key-derivation %q: want aws", o.derivation))
	case o.signKey != "" || o.signCert != "" || o.signKeyID != "":
		return nil, usage(errors.New("--sign-key-derivation aws derives the key from your AWS credentials: it does not go with --sign-key, --sign-cert or --sign-key-id"))
	case o.service == "":
		return nil, usage(errors.New("--sign-key-derivation aws needs --sigv4-service, the service the derived key is scoped to (for EKS: eks)"))
	}
	headers, err := o.signHeaderValues()
	if err != nil {
		return nil, err
	}
	provider, region, err := o.awsCredentials(ctx, guard, "--sign-key-derivation aws")
	if err != nil {
		return nil, err
	}
	scope := map[string]string{"region": region, "service": o.service}
	var mu sync.Mutex
	var signer *httpsig.Signer
	var signed aws.Credentials
	return func(req *http.Request) error {
		c, err := provider.Retrieve(req.Context())
		if err != nil {
			return fmt.Errorf("AWS credentials: %w", sigv4.RedactError(err))
		}
		mu.Lock()
		if signer == nil || c.AccessKeyID != signed.AccessKeyID || c.SecretAccessKey != signed.SecretAccessKey || c.SessionToken != signed.SessionToken {
			h := maps.Clone(headers)
			if c.SessionToken != "" {
				h["X-Amz-Security-Token"] = c.SessionToken
			}
			s, err := httpsig.NewSigner(httpsig.SignerOptions{Headers: h, Key: httpsig.Key{
				Secret:     []byte(c.SecretAccessKey),
				Derivation: &httpsig.Derivation{Ladder: httpsig.SigV4Ladder(), Name: c.AccessKeyID, Scope: scope},
			}})
			if err != nil {
				mu.Unlock()
				return fmt.Errorf("--sign-key-derivation aws: %w", err)
			}
			signer, signed = s, c
		}
		s := signer
		mu.Unlock()
		return s.Sign(req)
	}, nil
}

// httpSig builds the KEP-6308 signer: the key (a file or a token), its certificate or key
// ID, the audience and any other covered headers, all checked now.
func (o *signOptions) httpSig(guard *execcache.Guard) (*httpsig.Signer, io.Closer, error) {
	switch {
	case o.signKey == "":
		return nil, nil, usage(errors.New("--sign rfc9421 needs --sign-key"))
	case o.signCert == "" && o.signKeyID == "":
		return nil, nil, usage(errors.New("--sign rfc9421 needs --sign-cert (the key's certificate is the identity) or --sign-key-id (the name the verifier knows the key by)"))
	case o.signCert != "" && o.signKeyID != "":
		return nil, nil, usage(errors.New("--sign-cert and --sign-key-id are exclusive: a certificate key's keyid is the certificate's digest"))
	}
	headers, err := o.signHeaderValues()
	if err != nil {
		return nil, nil, err
	}
	key := httpsig.Key{KeyID: o.signKeyID}
	if o.signCert != "" {
		b, err := os.ReadFile(o.signCert)
		if err != nil {
			return nil, nil, invalidConfig(fmt.Errorf("--sign-cert: %w", err))
		}
		cert, err := pemkey.Certificate(b)
		if err != nil {
			return nil, nil, invalidConfig(fmt.Errorf("--sign-cert: %w", err))
		}
		key.Certificate = cert
	}
	ko, err := guardedKeyOptions(guard, "--sign-key", o.signKey)
	if err != nil {
		return nil, nil, err
	}
	signer, closer, err := keys.OpenSigner(o.signKey, ko)
	if err != nil {
		return nil, nil, invalidConfig(fmt.Errorf("--sign-key: %w", err))
	}
	key.Signer = signer
	s, err := httpsig.NewSigner(httpsig.SignerOptions{Key: key, Headers: headers})
	if err != nil {
		_ = closer.Close()
		return nil, nil, invalidConfig(fmt.Errorf("--sign rfc9421: %w", err))
	}
	return s, closer, nil
}

// sigv4 loads AWS credentials the way the AWS CLI does (environment, shared config and
// credentials files, SSO, process credentials, instance roles) and fails now if there are
// none.
func (o *signOptions) sigv4(ctx context.Context, guard *execcache.Guard) (func(*http.Request) error, error) {
	if o.service == "" {
		return nil, usage(errors.New("--sign sigv4 needs --sigv4-service"))
	}
	provider, region, err := o.awsCredentials(ctx, guard, "sigv4")
	if err != nil {
		return nil, err
	}
	sign, err := sigv4.New(sigv4.Options{
		Service: o.service,
		Region:  region,
		Credentials: func(ctx context.Context) (credentials.Credentials, error) {
			c, err := provider.Retrieve(ctx)
			return credentials.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken, Expires: c.Expires}, err
		},
	})
	if err != nil {
		return nil, invalidConfig(err)
	}
	return sign, nil
}

// awsCredentials loads AWS credentials the way the AWS CLI does (environment, shared
// config and credentials files, SSO, process credentials, instance roles) and fails now if
// there are none; it returns them cached, and the region (--sigv4-region, else the
// configuration's). what names the flag in errors.
func (o *signOptions) awsCredentials(ctx context.Context, guard *execcache.Guard, what string) (*aws.CredentialsCache, string, error) {
	ctx, cancel := context.WithTimeout(ctx, o.awsTimeout)
	defer cancel()
	files, err := guardedAWSFiles(guard)
	if err != nil {
		return nil, "", err
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, files...)
	if err != nil {
		return nil, "", invalidConfig(fmt.Errorf("%s: loading the AWS configuration: %w", what, sigv4.RedactError(err)))
	}
	region := o.region
	if region == "" {
		region = cfg.Region
	}
	if region == "" {
		return nil, "", invalidConfig(fmt.Errorf("%s: no region: pass --sigv4-region or set AWS_REGION", what))
	}
	provider := aws.NewCredentialsCache(cfg.Credentials)
	if _, err := provider.Retrieve(ctx); err != nil {
		return nil, "", invalidConfig(fmt.Errorf("%s: no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE naming a profile in ~/.aws/config or ~/.aws/credentials (%w)", what, sigv4.RedactError(err)))
	}
	return provider, region, nil
}

// clientCertificate loads --client-cert with the key --client-key names (a file or a
// pkcs11: URI) and checks them now.
func clientCertificate(certFile, keyURI string, guard *execcache.Guard, log *slog.Logger) (*keys.ClientCertificate, error) {
	ko, err := guardedKeyOptions(guard, "--client-key", keyURI)
	if err != nil {
		return nil, err
	}
	ks, err := keys.Open(keyURI, ko)
	if err != nil {
		return nil, invalidConfig(fmt.Errorf("--client-key: %w", err))
	}
	cc, err := keys.NewClientCertificate(keys.ClientCertOptions{CertFile: certFile, Key: ks, Logger: log})
	if err != nil {
		_ = ks.Close()
		return nil, invalidConfig(fmt.Errorf("--client-cert: %w", err))
	}
	return cc, nil
}
