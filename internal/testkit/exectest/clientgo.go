package exectest

import (
	"context"
	"net/http"
	"testing"

	"k8s.io/client-go/rest"
)

// ClientGoGet makes one GET of url with client-go's own exec authenticator (cfg's exec
// provider), the oracle parity tests compare kplug's runtime with; the plugin runs as
// client-go runs it. It returns the request's error; the response is discarded.
func ClientGoGet(t testing.TB, cfg *rest.Config, url string) error {
	t.Helper()
	client, err := rest.HTTPClientFor(rest.CopyConfig(cfg))
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
