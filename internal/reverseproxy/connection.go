package reverseproxy

import (
	"fmt"
	"net/http"
	"strings"
)

// CheckConnection refuses a Connection header that names anything but close, keep-alive
// and upgrade, in any of its field lines and in any case. httputil.ReverseProxy removes
// every field that Connection names (RFC 9110 §7.6.1), so a proxy that checks a request
// and then forwards it would otherwise let the client choose which of the checked fields
// never reach the upstream: a signed Impersonate-User named in Connection is verified, then
// dropped. Those three options are all that HTTP/1.1 clients send; none names an
// end-to-end field. Over HTTP/2 Connection is a protocol error and never reaches a handler.
func CheckConnection(h http.Header) error {
	for _, line := range h.Values("Connection") {
		for token := range strings.SplitSeq(line, ",") {
			// ReverseProxy trims these (textproto.TrimString) before it removes a field.
			token = strings.Trim(token, " \t\r\n")
			switch strings.ToLower(token) {
			case "", "close", "keep-alive", "upgrade":
				continue
			}
			if len(token) > 64 {
				token = token[:64] + "..."
			}
			return fmt.Errorf("the Connection header names %q: only close, keep-alive and upgrade are accepted, because a proxy removes every field that Connection names before it forwards the request", token)
		}
	}
	return nil
}

// IsUpgrade reports whether req asks to switch protocols (SPDY, WebSocket): its Connection
// header has the token "upgrade", in any field line and any case. Such requests go upstream
// over HTTP/1.1, and their bodies are streams.
func IsUpgrade(req *http.Request) bool {
	for _, v := range req.Header.Values("Connection") {
		for token := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(token), "upgrade") {
				return true
			}
		}
	}
	return false
}

// bearerSubprotocol prefixes the WebSocket subprotocol in which kube-apiserver accepts a
// bearer token from clients that cannot set Authorization (browsers):
// "base64url.bearer.authorization.k8s.io.<token>".
const bearerSubprotocol = "base64url.bearer.authorization.k8s.io." //nolint:gosec // a protocol name, not a credential

// DropBearerSubprotocol removes a bearer token carried as a WebSocket subprotocol, which
// kube-apiserver reads like Authorization, and keeps the other subprotocols: a proxy that
// tells the server who the user is (front-proxy identity) must not send the client's
// token along, nor let it stand in for the identity it decided.
func DropBearerSubprotocol(h http.Header) {
	protocols := h.Values("Sec-WebSocket-Protocol")
	if len(protocols) == 0 {
		return
	}
	var kept []string
	for _, line := range protocols {
		for p := range strings.SplitSeq(line, ",") {
			if p = strings.TrimSpace(p); p != "" && !strings.HasPrefix(strings.ToLower(p), bearerSubprotocol) {
				kept = append(kept, p)
			}
		}
	}
	h.Del("Sec-WebSocket-Protocol")
	if len(kept) > 0 {
		h.Set("Sec-WebSocket-Protocol", strings.Join(kept, ", "))
	}
}
