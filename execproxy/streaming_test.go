//go:build unix

package execproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	"github.com/kplug/kplug/execproxy/server"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	spdytransport "k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

const execOutput = "hello from the container\n"

// execUpstream serves pods/exec with the real Kubernetes streaming libraries, over
// WebSocket (v5.channel.k8s.io, kubectl's default) and over SPDY (v4.channel.k8s.io, the
// fallback), as the kubelet does behind the API server.
func execUpstream(t *testing.T) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/namespaces/default/pods/web/exec", func(w http.ResponseWriter, r *http.Request) {
		const success = `{"metadata":{},"status":"Success"}`
		if wsstream.IsWebSocketRequest(r) {
			channels := []wsstream.ChannelType{wsstream.ReadChannel, wsstream.WriteChannel, wsstream.WriteChannel, wsstream.WriteChannel, wsstream.ReadChannel}
			conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
				"v5.channel.k8s.io": {Binary: true, Channels: channels},
				"v4.channel.k8s.io": {Binary: true, Channels: channels},
			})
			_, streams, err := conn.Open(w, r)
			if err != nil {
				t.Errorf("websocket: %v", err)
				return
			}
			defer conn.Close()
			_, _ = streams[1].Write([]byte(execOutput))
			_, _ = streams[3].Write([]byte(success))
			return
		}
		if _, err := httpstream.Handshake(r, w, []string{"v4.channel.k8s.io"}); err != nil {
			t.Errorf("spdy handshake: %v", err)
			return
		}
		type stream struct {
			s     httpstream.Stream
			reply <-chan struct{}
		}
		streams := make(chan stream, 4)
		conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, reply <-chan struct{}) error {
			streams <- stream{s, reply}
			return nil
		})
		if conn == nil {
			t.Error("spdy upgrade failed")
			return
		}
		defer conn.Close()
		byType := map[string]httpstream.Stream{}
		for len(byType) < 2 { // the client opens the error and stdout streams
			select {
			case s := <-streams:
				<-s.reply
				byType[s.s.Headers().Get("streamType")] = s.s
			case <-time.After(10 * time.Second):
				t.Error("spdy: the client opened no streams")
				return
			}
		}
		_, _ = byType["stdout"].Write([]byte(execOutput))
		_ = byType["stdout"].Close()
		_, _ = byType["error"].Write([]byte(success))
		_ = byType["error"].Close()
	})
	mux.HandleFunc("/api/v1/namespaces/default/pods/web/portforward", func(w http.ResponseWriter, r *http.Request) {
		echo := func(s httpstream.Stream, reply <-chan struct{}) error {
			go func() {
				<-reply
				if s.Headers().Get("streamType") == "data" {
					_, _ = io.Copy(s, s) // the "container" echoes what it gets
				}
				// An error stream closed without data tells the client all went well; left
				// open, the client waits for it when the connection ends.
				_ = s.Close()
			}()
			return nil
		}
		if wsstream.IsWebSocketRequest(r) {
			// kubectl's default since 1.31: SPDY carried in WebSocket binary messages, which
			// the API server unwraps before the kubelet.
			up := gwebsocket.Upgrader{Subprotocols: []string{"SPDY/3.1+portforward.k8s.io"}}
			ws, err := up.Upgrade(w, r, nil)
			if err != nil {
				t.Errorf("port-forward websocket: %v", err)
				return
			}
			conn, err := spdy.NewServerConnection(portforward.NewTunnelingConnection("server", ws), echo)
			if err != nil {
				t.Errorf("spdy over websocket: %v", err)
				return
			}
			<-conn.CloseChan()
			return
		}
		if _, err := httpstream.Handshake(r, w, []string{"portforward.k8s.io"}); err != nil {
			t.Errorf("port-forward handshake: %v", err)
			return
		}
		if conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, echo); conn != nil {
			<-conn.CloseChan()
		}
	})
	return mux
}

func TestExecThroughTheProxy(t *testing.T) {
	up := upstream(t)
	up.Config.Handler = execUpstream(t)
	cfg, _ := proxied(t, serve(t, up, nil), up.URL)
	u, _ := url.Parse(up.URL + "/api/v1/namespaces/default/pods/web/exec?command=hostname&stdout=true")
	for name, newExecutor := range map[string]func() (remotecommand.Executor, error){
		"websocket": func() (remotecommand.Executor, error) {
			return remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
		},
		"spdy": func() (remotecommand.Executor, error) { return remotecommand.NewSPDYExecutor(cfg, "POST", u) },
	} {
		ex, err := newExecutor()
		if err != nil {
			t.Fatal(err)
		}
		var stdout bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout})
		cancel()
		if err != nil || stdout.String() != execOutput {
			t.Errorf("%s exec through the proxy: %q, %v", name, stdout.String(), err)
		}
	}
}

func TestPortForwardThroughTheProxy(t *testing.T) {
	up := upstream(t)
	up.Config.Handler = execUpstream(t)
	cfg, _ := proxied(t, serve(t, up, nil), up.URL)
	u, _ := url.Parse(up.URL + "/api/v1/namespaces/default/pods/web/portforward")
	rt, upgrader, err := spdytransport.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, dialer := range map[string]httpstream.Dialer{
		"spdy":      spdytransport.NewDialerForStreaming(upgrader, &http.Client{Transport: rt}, "POST", u),
		"websocket": ws,
	} {
		t.Run(name, func(t *testing.T) { echoThroughForwardedPort(t, dialer) })
	}
}

// echoThroughForwardedPort forwards a local port to the pod's port 80 and checks that the
// echoing "container" answers through it.
func echoThroughForwardedPort(t *testing.T, dialer httpstream.Dialer) {
	port, stop := forwardPort(t, dialer)
	defer stop()
	pingPong(t, port)
}

// forwardPort forwards a local port to the pod's port 80 until stop is called.
func forwardPort(t *testing.T, dialer httpstream.Dialer) (port uint16, stop func()) {
	t.Helper()
	stopCh, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{"0:80"}, stopCh, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	stop = func() {
		close(stopCh)
		if err := <-done; err != nil {
			t.Errorf("port-forward ended with %v", err)
		}
	}
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward: %v", err)
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		stop()
		t.Fatalf("ports %v, %v", ports, err)
	}
	return ports[0].Local, stop
}

// pingPong sends a line through the forwarded port and expects it back.
func pingPong(t *testing.T, port uint16) {
	t.Helper()
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || got != "ping\n" {
		t.Errorf("through the forwarded port: %q, %v", got, err)
	}
}

// An open port-forward (an upgraded stream, which http.Server no longer counts) keeps
// the proxy from its idle exit; once it ends, the idle timeout runs again.
func TestIdleTimeoutWaitsForOpenStreams(t *testing.T) {
	const idle = 300 * time.Millisecond
	up := upstream(t)
	up.Config.Handler = execUpstream(t)
	r := serve(t, up, func(o *server.Options) { o.IdleTimeout = idle })
	cfg, _ := proxied(t, r, up.URL)
	u, _ := url.Parse(up.URL + "/api/v1/namespaces/default/pods/web/portforward")
	rt, upgrader, err := spdytransport.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	port, stop := forwardPort(t, spdytransport.NewDialerForStreaming(upgrader, &http.Client{Transport: rt}, "POST", u))
	select {
	case err := <-r.done:
		r.done <- err
		stop()
		t.Fatalf("the proxy exited (%v) with a port-forward open", err)
	case <-time.After(3 * idle):
	}
	pingPong(t, port)
	stop()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy did not exit once the port-forward ended")
	}
}

// connectProxy is an HTTP CONNECT proxy, as a cluster's proxy-url names, that counts the
// tunnels it opens.
type connectProxy struct {
	*httptest.Server
	tunnels atomic.Int32
}

func newConnectProxy(t *testing.T) *connectProxy {
	p := &connectProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		backend, err := (&net.Dialer{}).DialContext(r.Context(), "tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		p.tunnels.Add(1)
		w.WriteHeader(http.StatusOK)
		client, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			_ = backend.Close()
			return
		}
		go func() {
			_, _ = io.Copy(backend, rw)
			_ = backend.Close()
		}()
		_, _ = io.Copy(client, backend)
		_ = client.Close()
	}))
	t.Cleanup(p.Close)
	return p
}

// The proxy reaches the API server through the cluster's proxy-url (rest.Config.Proxy, as
// plugin.Info.RESTConfig sets it), for REST calls and for upgrades.
func TestUpstreamThroughTheClusterProxy(t *testing.T) {
	up := upstream(t)
	up.Config.Handler = execUpstream(t)
	cp := newConnectProxy(t)
	cpURL, _ := url.Parse(cp.URL)
	r := serve(t, up, func(o *server.Options) { o.Upstream.Proxy = http.ProxyURL(cpURL) })
	cfg, _ := proxied(t, r, up.URL)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(up.URL + "/api/v1/namespaces") // any answer: the test upstream serves only exec and port-forward
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if n := cp.tunnels.Load(); n != 1 {
		t.Fatalf("after a REST call the cluster proxy opened %d tunnels, want 1", n)
	}
	u, _ := url.Parse(up.URL + "/api/v1/namespaces/default/pods/web/exec?command=hostname&stdout=true")
	ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout}); err != nil || stdout.String() != execOutput {
		t.Errorf("exec through both proxies: %q, %v", stdout.String(), err)
	}
	if n := cp.tunnels.Load(); n != 2 {
		t.Errorf("after an exec the cluster proxy had opened %d tunnels, want 2 (the upgrade has its own connection)", n)
	}
}
