package sidecar

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kplug/kplug/internal/testkit/discoverytest"
	"github.com/kplug/kplug/mvproxy"
	"github.com/kplug/kplug/mvproxy/discovery"
)

// Issue 13: LocalDiscovery ran its shared fetch with the first caller's context, so a client
// that gave up cancelled the refresh the others waited for, and the cancellation was
// remembered as the refresh's failure for MinInterval.
func TestLocalDiscoveryCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := mvproxy.NewDirectory("self")
		release := make(chan struct{})
		fetches := 0
		c := &LocalDiscovery{
			Directory: dir, Interval: time.Hour, MinInterval: time.Minute,
			Fetch: func(ctx context.Context) (*discovery.Document, error) {
				fetches++
				select {
				case <-release:
					return discoverytest.Document("batch/v1/jobs"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			},
		}
		first, giveUp := context.WithCancel(t.Context())
		firstErr, secondErr := make(chan error, 1), make(chan error, 1)
		go func() { firstErr <- c.Refresh(first) }()
		synctest.Wait()
		go func() { secondErr <- c.Refresh(t.Context()) }()
		synctest.Wait()

		giveUp()
		if err := <-firstErr; !errors.Is(err, context.Canceled) {
			t.Errorf("the caller that gave up: %v, want its own context's error", err)
		}
		close(release)
		if err := <-secondErr; err != nil {
			t.Errorf("the caller that waited: %v", err)
		}
		if err := c.Refresh(t.Context()); err != nil || fetches != 1 || !dir.Local().Serves(discovery.GVR{Group: "batch", Version: "v1", Resource: "jobs"}) {
			t.Errorf("within MinInterval: %v after %d fetches, local discovery %v", err, fetches, dir.Local())
		}
	})
}

// A fetch that hangs is bounded by Timeout, not by a caller.
func TestLocalDiscoveryTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &LocalDiscovery{
			Directory: mvproxy.NewDirectory("self"), Interval: time.Hour, MinInterval: time.Minute, Timeout: 5 * time.Second,
			Fetch: func(ctx context.Context) (*discovery.Document, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
		}
		start := time.Now()
		if err := c.Refresh(t.Context()); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 5*time.Second {
			t.Errorf("hanging fetch: %v after %v", err, time.Since(start))
		}
	})
}

// pathNotServed tells a 404 for a path kube-apiserver serves nothing at (which makes the
// sidecar read the local discovery again) from one for a missing object, in the shapes of
// 1.36 (plain text for a group or version) and of 1.38, which answers a metav1.Status
// without details there too (kubernetes/kubernetes#138219; issue 28).
func TestPathNotServed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, contentType, body string
		want                    bool
	}{
		{"1.36, a group or version not served", "text/plain; charset=utf-8", "404 page not found\n", true},
		{"1.36, a resource not served", "application/json", `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}`, true},
		{"1.38, any path not served", "application/json", `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}`, true},
		{"a missing object", "application/json", `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"jobs.batch \"j\" not found","reason":"NotFound","details":{"name":"j","group":"batch","kind":"jobs"},"code":404}`, false},
	}
	for _, tt := range tests {
		resp := &http.Response{StatusCode: http.StatusNotFound, Header: http.Header{"Content-Type": {tt.contentType}}, Body: io.NopCloser(strings.NewReader(tt.body))}
		if got := pathNotServed(resp); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
		if rest, _ := io.ReadAll(resp.Body); string(rest) != tt.body {
			t.Errorf("%s: the body left to pass on is %q", tt.name, rest)
		}
	}
}
