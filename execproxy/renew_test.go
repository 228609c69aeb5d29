//go:build unix

package execproxy_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kplug/kplug/execproxy/server"
)

// TestCloseIdleConnectionsRenewsThePool: after a signal on CloseIdleConnections (a rotated
// client certificate), a new request reaches the API server on a new connection even while
// a watch holds the old HTTP/2 connection busy, and the watch keeps streaming.
func TestCloseIdleConnectionsRenewsThePool(t *testing.T) {
	events := make(chan string)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/watch" {
			fmt.Fprintln(w, "opened")
			_ = http.NewResponseController(w).Flush()
			for {
				select {
				case e := <-events:
					fmt.Fprintln(w, e)
					_ = http.NewResponseController(w).Flush()
				case <-r.Context().Done():
					return
				}
			}
		}
		fmt.Fprint(w, r.RemoteAddr) // which upstream connection carried the request
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	renew := make(chan struct{})
	r := serve(t, up, func(o *server.Options) { o.RenewConnections = renew })
	t.Cleanup(func() { close(renew) })
	c, _ := client(t, r, up.URL)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL+"/watch", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	watch := bufio.NewReader(resp.Body)
	if line, _ := watch.ReadString('\n'); line != "opened\n" {
		t.Fatalf("watch: %q", line)
	}
	before := get(t, c, up.URL+"/who")
	if again := get(t, c, up.URL+"/who"); again != before {
		t.Fatalf("without a renewal requests should share the connection: %s, then %s", before, again)
	}
	renew <- struct{}{}
	var after string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if after = get(t, c, up.URL+"/who"); after != before {
			break
		}
	}
	if after == before {
		t.Errorf("after the renewal the request still came over %s", before)
	}
	events <- "still streaming"
	if line, err := watch.ReadString('\n'); line != "still streaming\n" {
		t.Errorf("the watch opened before the renewal: %q, %v", line, err)
	}
}
