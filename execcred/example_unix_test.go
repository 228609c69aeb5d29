//go:build unix

package execcred_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/kplug/kplug/execcred"
)

// The pipeline from configuration to the wire. The plugin is a shell one-liner that counts
// its runs in a file; a kubeconfig's exec block gives the same Config through
// FromRESTConfig.
func Example() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.URL.Path, r.Header.Get("Authorization"))
	}))
	defer api.Close()
	runs := filepath.Join(os.TempDir(), fmt.Sprintf("kplug-example-%d", os.Getpid()))
	defer os.Remove(runs)

	// Configuration, validated once.
	cfg := execcred.Config{
		Command:         "sh",
		Args:            []string{"-c", `echo x >>"$RUNS"; echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok-1"}}'`},
		Env:             []string{"RUNS=" + runs},
		APIVersion:      execcred.V1,
		InteractiveMode: execcred.Never,
	}
	plugin, err := execcred.NewPlugin(cfg, execcred.PluginOptions{Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The source and its decorators, each a wrapper (execcred.New composes these).
	var src execcred.Source = plugin
	src = execcred.WithBackoff(src, execcred.BackoffOptions{Initial: time.Second})
	src = execcred.WithCache(src, execcred.CacheOptions{})
	src = execcred.WithRefreshAhead(src, execcred.RefreshAheadOptions{})
	// The transport.
	client := &http.Client{Transport: &execcred.Transport{Source: src, RetryAfterRefresh: true}}

	for _, path := range []string{"/api", "/apis"} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, api.URL+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(string(body))
	}
	count, _ := os.ReadFile(runs)
	fmt.Println("plugin runs:", len(count)/2)
	// Output:
	// /api Bearer tok-1
	// /apis Bearer tok-1
	// plugin runs: 1
}
