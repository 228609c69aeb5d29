//go:build unix

package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/execproxy/server"
)

// addAPIKey is a whole proxy plugin: it reads the file its --api-key-file argument names
// and adds the key to every request it forwards. Its main function is one line:
//
//	func main() { server.Main(addAPIKey) }
func addAPIKey(_ context.Context, req *server.Request) (*server.Options, func(), error) {
	fs := flag.NewFlagSet("api-key-proxy", flag.ContinueOnError)
	keyFile := fs.String("api-key-file", "", "file holding the API key")
	if err := fs.Parse(req.Args); err != nil {
		return nil, nil, err
	}
	key, err := os.ReadFile(*keyFile)
	if err != nil {
		return nil, nil, err
	}
	return &server.Options{
		ModifyRequest: func(r *http.Request) error {
			r.Header.Set("X-Api-Key", strings.TrimSpace(string(key)))
			return nil
		},
	}, nil, nil
}

// The plugin runs here in-process through Run, as a plugin that is its own proxy (Main
// would start a daemon instead), for a client that holds its lock file, reads the answer
// and sends a request through the proxy it names.
func Example() {
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s with X-Api-Key %q", r.Method, r.URL.Path, r.Header.Get("X-Api-Key"))
	}))
	defer api.Close()
	dir, _ := os.MkdirTemp("", "kp") // short: a socket path is limited to about 100 bytes
	defer os.RemoveAll(dir)
	keyFile := filepath.Join(dir, "api-key")
	_ = os.WriteFile(keyFile, []byte("s3cret\n"), 0o600)

	// The client holds a lock for as long as it lives, and names it in KUBERNETES_EXEC_INFO.
	lock, err := execproxy.NewLock(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	apiCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})
	execInfo := fmt.Sprintf(`{"kind":"ExecCredential","apiVersion":%q,"spec":{"cluster":{"server":%q,"certificate-authority-data":%q},"interactive":false,"lockFilePath":%q}}`,
		execcred.V1, api.URL, base64.StdEncoding.EncodeToString(apiCA), lock.Path)

	answer, stdout := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- server.Run(context.Background(), addAPIKey, server.Process{
			Args:     []string{"--api-key-file", keyFile},
			ExecInfo: execInfo,
			Stdout:   stdout,
		})
	}()
	out, _ := io.ReadAll(answer) // complete once the plugin closes stdout
	var cred execcred.ExecCredential
	if err := json.Unmarshal(out, &cred); err != nil {
		fmt.Println(err, <-done)
		return
	}
	fmt.Println("proxy:", strings.Split(cred.Status.ProxyConfig.URL, "/")[0])

	c, err := hopClient(cred.Status)
	if err != nil {
		fmt.Println(err)
		return
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, api.URL+"/api/v1/namespaces", nil)
	resp, err := c.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.CloseIdleConnections()
	fmt.Println(string(body))

	_ = lock.Close() // the client exits, and so does its proxy
	fmt.Println("proxy stopped:", <-done)
	// Output:
	// proxy: unix:
	// GET /api/v1/namespaces with X-Api-Key "s3cret"
	// proxy stopped: <nil>
}

// hopClient reaches the API server through the proxy an answer names, with mutual TLS on
// the hop, as every exec proxy client does (kplug's own: execproxy.Connect).
func hopClient(s *execcred.Status) (*http.Client, error) {
	cert, err := tls.X509KeyPair([]byte(s.ClientCertificateData), []byte(s.ClientKeyData))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.ProxyConfig.CertificateAuthorityData)
	socket := strings.TrimPrefix(s.ProxyConfig.URL, "unix://")
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
		TLSClientConfig: &tls.Config{
			RootCAs: roots, ServerName: wire.ProxyServerName, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		},
	}}, nil
}
