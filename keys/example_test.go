package keys_test

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/keys"
)

// proxyOptions is the heart of a proxy plugin's Func (see execproxy/server): the client
// certificate whose key keyURI names (a PEM file here; a TPM 2.0 key file or a tpm: URI
// keeps it in the TPM, a pkcs11: URI on a token)
// authenticates the TLS connections to the API server, and every request is signed with an
// KEP-6308 HTTP message signature (package httpsig). Close the returned io.Closer once
// the proxy has stopped.
func proxyOptions(ctx context.Context, certFile, keyURI string, signKey crypto.Signer) (*server.Options, io.Closer, error) {
	key, err := keys.Open(keyURI, keys.Options{})
	if err != nil {
		return nil, nil, err
	}
	cert, err := keys.NewClientCertificate(keys.ClientCertOptions{CertFile: certFile, Key: key})
	if err != nil {
		_ = key.Close()
		return nil, nil, err
	}
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     httpsig.Key{Signer: signKey, KeyID: "dave-laptop"},
		Headers: map[string]string{httpsig.AudienceHeader: "https://prod.example.com"},
	})
	if err != nil {
		_ = cert.Close()
		return nil, nil, err
	}
	return &server.Options{
		ModifyRequest:        signer.Sign,
		GetClientCertificate: cert.GetClientCertificate,
		ClientSessionCache:   cert.ClientSessionCache(),      // a hardware key signs once per full handshake
		RenewConnections:     cert.Watch(ctx, 2*time.Second), // a rotated certificate retires pooled connections
	}, cert, nil
}

// The options a proxy plugin builds from modify's pieces, at work: the proxy's upstream
// transport presents the certificate and signs each request, as this one does against an
// API server that requires a client certificate.
func Example() {
	dir, _ := os.MkdirTemp("", "modify")
	defer os.RemoveAll(dir)
	ca, err := testpki.NewCA(dir, "ca", "client CA") // the cluster's client CA, for the example
	if err != nil {
		panic(err)
	}
	alice, err := ca.IssueClient("alice", "alice") // alice.crt and alice.key in dir
	if err != nil {
		panic(err)
	}
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		covered, _, _ := strings.Cut(r.Header.Get("Signature-Input"), ";") // the parameters after it hold a nonce
		fmt.Fprintf(w, "%s signed %s", r.TLS.PeerCertificates[0].Subject.CommonName, covered)
	}))
	api.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	api.StartTLS()
	defer api.Close()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	signKey := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)) // a fixed key, for the example only
	opts, closer, err := proxyOptions(ctx, alice.CertFile, alice.KeyFile, signKey)
	if err != nil {
		panic(err)
	}
	defer closer.Close()

	roots := x509.NewCertPool()
	roots.AddCert(api.Certificate())
	upstream := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, GetClientCertificate: opts.GetClientCertificate, ClientSessionCache: opts.ClientSessionCache,
	}}
	defer upstream.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL+"/api/v1/namespaces", nil)
	if err := opts.ModifyRequest(req); err != nil {
		panic(err)
	}
	resp, err := upstream.RoundTrip(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output: alice signed sig1=("@method" "@authority" "@path" "@query" "x-k8s-audience")
}

// A plugin built with kplug's SDK (execproxy/server) signs KEP-6308 requests with a key
// that stays in the TPM: `kplug key create` made the key file, and the signing CA issued
// the certificate for it. The signer is what the proxy's ModifyRequest calls (see
// Example); the TPM signs once per request.
func ExampleOpenSigner() {
	home, _ := os.UserHomeDir()
	key, closer, err := keys.OpenSigner(home+"/.kube/kplug/sign.tss2", keys.Options{TPMDevice: os.Getenv("KPLUG_TPM_DEVICE")})
	if err != nil {
		fmt.Println(err) // e.g. tpm: no TPM at /dev/tpmrm0: ...
		return
	}
	defer closer.Close()
	certPEM, err := os.ReadFile(home + "/.kube/kplug/sign.crt")
	if err != nil {
		fmt.Println(err)
		return
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		fmt.Println("sign.crt: no PEM certificate")
		return
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		fmt.Println(err)
		return
	}
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     httpsig.Key{Signer: key, Certificate: cert},
		Headers: map[string]string{httpsig.AudienceHeader: "https://prod.example.com"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	req, _ := http.NewRequest(http.MethodGet, "https://prod.example.com/api/v1/namespaces", nil)
	if err := signer.Sign(req); err != nil {
		fmt.Println(err)
	}
}
