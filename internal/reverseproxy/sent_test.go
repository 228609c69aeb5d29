package reverseproxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestSent(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	var sent Sent
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, http.NoBody)
	if resp, err := tr.RoundTrip(sent.Trace(req)); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	if !sent.Maybe() {
		t.Error("a request the server answered was not recorded as sent")
	}

	// Nothing listens: the dial fails, nothing is sent.
	ln, _ := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	_ = ln.Close()
	var never Sent
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr, http.NoBody)
	if resp, err := tr.RoundTrip(never.Trace(req)); err == nil {
		resp.Body.Close()
		t.Fatal("a request to a closed port succeeded")
	}
	if never.Maybe() {
		t.Error("a request whose dial failed was recorded as sent")
	}
}

func TestRepeatable(t *testing.T) {
	t.Parallel()
	for method, want := range map[string]bool{
		http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true,
		http.MethodPost: false, http.MethodPut: false, http.MethodPatch: false, http.MethodDelete: false,
	} {
		if got := Repeatable(method); got != want {
			t.Errorf("Repeatable(%s) = %v", method, got)
		}
	}
}
