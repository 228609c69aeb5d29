//go:build go1.27

package reverseproxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestNewServerCountsHeaderValuesAsKubeAPIServer (issue 28): Go 1.27 refuses a request
// with more than 500 header values by default; the proxies' servers take kube-apiserver's
// 16384, and refuse the one more with 431. Each field line counts, Host included.
func TestNewServerCountsHeaderValuesAsKubeAPIServer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, len(r.Header.Values("Impersonate-Group")))
	}))
	srv.Config = NewServer(srv.Config.Handler, nil, nil)
	srv.Start()
	defer srv.Close()
	for _, tt := range []struct {
		lines int // besides Host
		want  string
	}{
		{MaxHeaderValues - 1, "HTTP/1.1 200 OK"},
		{MaxHeaderValues, "HTTP/1.1 431 Request Header Fields Too Large"},
	} {
		conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		req := "GET / HTTP/1.1\r\nHost: kplug\r\n" + strings.Repeat("Impersonate-Group: g\r\n", tt.lines) + "\r\n"
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		status, _ := bufio.NewReader(conn).ReadString('\n')
		_ = conn.Close()
		if got := strings.TrimSpace(status); got != tt.want {
			t.Errorf("Host and %d more header lines: %q, want %q", tt.lines, got, tt.want)
		}
	}
}
