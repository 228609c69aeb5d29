package execcred

import (
	"bytes"
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"

	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/pemkey"
	"github.com/kplug/kplug/internal/privdir"
)

// newHTTPSignatureSource returns the Source of signing material for a kubeconfig user
// whose httpSignature block is h (LoadHTTPSignature) and whose other settings are cfg's:
//
//   - with key files, a KeyFiles source, cached until the certificate expires or a
//     server rejects it, when the files are read again (a rotated certificate is picked
//     up then);
//   - otherwise cfg's exec plugin, in New's pipeline (cached until expirationTimestamp,
//     refreshed ahead, one run for concurrent callers), asked for signing material in
//     spec.httpSignature; an answer without it, or without a value for a header h names,
//     is an error.
//
// Give it to HTTPTransport or ConfigFor: each request is signed, and carries no bearer
// token and no client certificate from the plugin. A user with static credentials (a
// token, basic auth, a client certificate) besides httpSignature, or with key files and
// an exec plugin, is refused, as is a block Validate refuses. Errors are *ConfigError
// when no plugin ran.
func newHTTPSignatureSource(cfg *rest.Config, h *HTTPSignature, o Options) (Source, error) {
	if err := h.Validate(); err != nil {
		return nil, &ConfigError{Err: err}
	}
	switch {
	case HasStaticCredentials(cfg):
		return nil, &ConfigError{Err: errors.New("httpSignature: the user also has a token, basic auth or a client certificate: a signed request carries no other credential; remove them")}
	case h.HasKeyFiles() && cfg.ExecProvider != nil:
		return nil, &ConfigError{Err: errors.New("httpSignature: the user has key files and an exec plugin: the key comes from one of them; remove the other")}
	case h.HasKeyFiles():
		files := &KeyFiles{CertFile: h.CertFile, KeyFile: h.KeyFile, BundleFile: h.CredentialBundleFile, Headers: h.headers()}
		if tpm := isTPMKeyFile(h.KeyFile); tpm || isKeyURI(h.KeyFile) {
			if o.OpenKey == nil {
				what := "not a file"
				if tpm {
					what = "a TPM 2.0 key file, which signs in the TPM"
				}
				return nil, &ConfigError{Err: fmt.Errorf("httpSignature.keyFile %q: %s, and this program opens PEM key files only", h.KeyFile, what)}
			}
			key, err := o.OpenKey(h.KeyFile)
			if err != nil {
				return nil, &ConfigError{Err: fmt.Errorf("httpSignature.keyFile: %w", err)}
			}
			files.Key = key
		}
		return WithCache(files, CacheOptions{Now: o.Now}), nil
	case cfg.ExecProvider == nil:
		return nil, &ConfigError{Err: errors.New("httpSignature: no key: set certFile and keyFile, or credentialBundleFile, or give the user an exec plugin that returns signing material")}
	}
	c, err := FromRESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.HTTPSignature = h.request()
	return New(*c, o)
}

// KeyFiles is the Source of signing material in files: a PEM certificate and its key
// (CertFile and KeyFile, or Key), or both in one PEM file (BundleFile), and the values of
// the signed headers. Each call reads the files again; wrap it in WithCache. The
// credential expires with the certificate. It is safe for concurrent use.
type KeyFiles struct {
	CertFile, KeyFile, BundleFile string
	// Key, if set, is the certificate's key, and KeyFile is not read: a key that never
	// leaves a token (PKCS#11), opened by the caller, who closes it.
	Key crypto.Signer
	// Headers are the signed headers' values; X-K8s-Audience must be among them.
	Headers map[string]string
}

// Credential reads the files and returns their signing material.
func (f *KeyFiles) Credential(context.Context, *Rejection) (*Credential, error) {
	certPEM, keyPEM, err := f.read()
	if err != nil {
		return nil, err
	}
	key := f.Key
	if key == nil {
		if key, err = pemkey.Parse(keyPEM); err != nil {
			return nil, fmt.Errorf("httpSignature key %s: %w", f.keyName(), err)
		}
	}
	leaf, err := leafOf(certPEM, key)
	if err != nil {
		return nil, fmt.Errorf("httpSignature certificate %s: %w", f.certName(), err)
	}
	signing, err := newSigning(httpsig.Key{Signer: key, Certificate: leaf}, "", f.Headers, "httpSignature", fileAudienceHint)
	if err != nil {
		return nil, err
	}
	return &Credential{HTTPSignature: signing, Expiry: leaf.NotAfter, seq: credentials.Add(1)}, nil
}

func (f *KeyFiles) read() (certPEM, keyPEM []byte, err error) {
	if f.BundleFile != "" {
		b, err := readSigningFile(f.BundleFile)
		if err != nil {
			return nil, nil, fmt.Errorf("httpSignature.credentialBundleFile: %w", err)
		}
		return b, b, nil
	}
	if certPEM, err = readSigningFile(f.CertFile); err != nil {
		return nil, nil, fmt.Errorf("httpSignature.certFile: %w", err)
	}
	if f.Key == nil {
		if keyPEM, err = readSigningFile(f.KeyFile); err != nil {
			return nil, nil, fmt.Errorf("httpSignature.keyFile: %w", err)
		}
	}
	return certPEM, keyPEM, nil
}

// signingFileLimit bounds a certificate, key or bundle file: a chain and a key are a few
// KiB.
const signingFileLimit = 1 << 20

// readSigningFile reads a file a kubeconfig names as signing material: a regular file
// (through links), never blocking on a FIFO nor reading a device without end, at most
// signingFileLimit bytes.
func readSigningFile(path string) ([]byte, error) {
	return privdir.ReadLinked(path, signingFileLimit)
}

func (f *KeyFiles) certName() string {
	if f.BundleFile != "" {
		return f.BundleFile
	}
	return f.CertFile
}

func (f *KeyFiles) keyName() string {
	if f.BundleFile != "" {
		return f.BundleFile
	}
	return f.KeyFile
}

// isTPMKeyFile reports whether path is a TPM 2.0 key file (TSS2 PRIVATE KEY PEM): a key
// that stays in the TPM, which OpenKey opens there, not a key KeyFiles can read.
func isTPMKeyFile(path string) bool {
	f, err := privdir.OpenLinked(path) // a regular file only: never blocks on a FIFO
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	return bytes.HasPrefix(bytes.TrimLeft(head[:n], " \t\r\n"), []byte("-----BEGIN TSS2 PRIVATE KEY-----"))
}
