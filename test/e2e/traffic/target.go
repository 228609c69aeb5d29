package traffic

import (
	"crypto/tls"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// HTTPSTarget is a Target at url (https://host:port) whose clients connect with tlsConfig
// (the roots to trust and the client certificate), as client-go does: HTTP/2, pinged after
// 30 s without a frame and dropped when the ping goes unanswered for 15 s; WebSocket
// watches over HTTP/1.1.
func HTTPSTarget(name, url string, tlsConfig *tls.Config) Target {
	return Target{
		Name: name,
		URL:  url,
		NewTransport: func() (http.RoundTripper, error) {
			return &http.Transport{
				TLSClientConfig:     tlsConfig.Clone(),
				ForceAttemptHTTP2:   true,
				MaxIdleConnsPerHost: 25,
				IdleConnTimeout:     90 * time.Second,
				TLSHandshakeTimeout: 10 * time.Second,
				HTTP2:               &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
			}, nil
		},
		NewDialer: func() (*websocket.Dialer, error) {
			c := tlsConfig.Clone()
			c.NextProtos = nil // WebSocket runs over HTTP/1.1
			return &websocket.Dialer{TLSClientConfig: c, HandshakeTimeout: 30 * time.Second}, nil
		},
	}
}
