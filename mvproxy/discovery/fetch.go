package discovery

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

// maxDocumentBytes bounds a discovery document read from another server.
const maxDocumentBytes = 32 << 20

// Fetch asks the server at baseURL for its own aggregated discovery (/apis and /api with
// profile=nopeer), adding header to each request, and indexes it.
func Fetch(ctx context.Context, client *http.Client, baseURL string, header http.Header) (*Document, error) {
	groups, err := fetchOne(ctx, client, baseURL+"/apis", header)
	if err != nil {
		return nil, err
	}
	core, err := fetchOne(ctx, client, baseURL+"/api", header)
	if err != nil {
		return nil, err
	}
	return NewDocument(groups, core), nil
}

func fetchOne(ctx context.Context, client *http.Client, url string, header http.Header) (*apidiscoveryv2.APIGroupDiscoveryList, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("discovery from %s: %w", url, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", AcceptNoPeer+","+AcceptAggregated)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("discovery from %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("discovery from %s: reading: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("discovery from %s: status %d: %s", url, resp.StatusCode, snippet(body))
	}
	if len(body) > maxDocumentBytes {
		return nil, fmt.Errorf("discovery from %s: larger than %d bytes", url, maxDocumentBytes)
	}
	l, err := Parse(body)
	if err != nil {
		return nil, fmt.Errorf("discovery from %s: %w", url, err)
	}
	return l, nil
}

// snippet is the start of a response body, for an error message.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
