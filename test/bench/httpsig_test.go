package bench

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/smithy-go/aws-http-auth/credentials"

	"github.com/kplug/kplug/execproxy/sigv4"
	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/keys"
)

// benchSigner is an httpsig signer for key, with the audience every KEP-6308 signer carries.
func benchSigner(b testing.TB, key crypto.Signer) *httpsig.Signer {
	b.Helper()
	s, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     httpsig.Key{Signer: key, KeyID: "bench-key"},
		Headers: map[string]string{httpsig.AudienceHeader: "https://bench.example"},
	})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchBody is a small object create, the size of a typical ConfigMap or Pod apply.
var benchBody = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bench","namespace":"default","labels":{"app":"bench"}},"data":{"key":"` + strings.Repeat("v", 1500) + `"}}`

// BenchmarkRequestSigning measures what signing adds to preparing one API request: an
// unsigned request (built, headers set, body attached), the same request signed with
// SigV4 (the smithy signer the exec proxy uses), and signed with httpsig in the KEP-6308
// profile with a key in process and the same key types in a software TPM, each without and
// with a body. docs/benchmarks.md has the ratios.
func BenchmarkRequestSigning(b *testing.B) {
	signV4, err := sigv4.New(sigv4.Options{Service: "eks", Region: "eu-west-1",
		Credentials: func(context.Context) (credentials.Credentials, error) {
			return credentials.Credentials{AccessKeyID: "AKIDBENCH", SecretAccessKey: "bench-secret"}, nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	type signer struct {
		name string
		sign func(*http.Request) error
	}
	signers := []signer{
		{"unsigned", nil},
		{"sigv4", signV4},
		{"httpsig-ecdsa-p256", benchSigner(b, ecKey).Sign},
		{"httpsig-ed25519", benchSigner(b, edKey).Sign},
		{"httpsig-rsa-2048", benchSigner(b, rsaKey).Sign},
	}
	// The same two key types in a (software) TPM: a signature per request, in the TPM.
	if uris, err := tpmKeys(b, "ecc256", "rsa2048"); err != nil {
		b.Logf("no TPM cases: %v", err)
	} else {
		for i, name := range []string{"httpsig-tpm-ecdsa-p256", "httpsig-tpm-rsa-2048"} {
			key, c, err := keys.OpenSigner(uris[i], keys.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close() })
			signers = append(signers, signer{name, benchSigner(b, key).Sign})
		}
	}
	for _, body := range []string{"", benchBody} {
		kind := "GET"
		if body != "" {
			kind = "POST-1.6KiB"
		}
		for _, s := range signers {
			b.Run(kind+"/"+s.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					req := prepare(b, body)
					if s.sign != nil {
						if err := s.sign(req); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// prepare builds the request client-go would hand to its transport.
func prepare(b *testing.B, body string) *http.Request {
	method, target := http.MethodGet, "https://cluster.example:6443/api/v1/namespaces/default/pods?limit=500"
	var rb io.Reader
	if body != "" {
		method, target = http.MethodPost, "https://cluster.example:6443/api/v1/namespaces/default/configmaps?fieldManager=kubectl-client-side-apply"
		rb = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, target, rb)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Accept", "application/json, */*")
	req.Header.Set("User-Agent", "kubectl/v1.36.3 (linux/amd64) kubernetes/bench")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}
