//go:build unix

package execproxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execproxy"
)

// A client connects with its kubeconfig's configuration (here built by hand) and sends
// requests through what the exec plugin answered. This plugin, a shell one-liner, answers
// with a token rather than a proxy; the client's code is the same either way.
func Example() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s as %s", r.URL.Path, r.Header.Get("Authorization"))
	}))
	defer api.Close()
	runtimeDir, err := os.MkdirTemp("", "execproxy-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(runtimeDir)

	cfg := &rest.Config{Host: api.URL, ExecProvider: &clientcmdapi.ExecConfig{
		Command:         "sh",
		Args:            []string{"-c", `echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok"}}'`},
		APIVersion:      "client.authentication.k8s.io/v1",
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}
	session, err := execproxy.Connect(context.Background(), cfg, execproxy.Options{RuntimeDir: runtimeDir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer session.Close() // releases the lock: a proxy would exit
	fmt.Println("proxied:", session.Proxied())

	// session.Config() is the same for client-go: kubernetes.NewForConfig(config).
	rt, err := session.Transport()
	if err != nil {
		fmt.Println(err)
		return
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, api.URL+"/version", nil)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output:
	// proxied: false
	// /version as Bearer tok
}
