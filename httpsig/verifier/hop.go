package verifier

import (
	"errors"
	"net"
	"net/http"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/reverseproxy"
)

// errTrailer refuses a request that declares trailers: they arrive after the body, are
// covered by no signature, and forwarding would pass them on.
var errTrailer = errors.New("the request declares trailers (Trailer header), which no signature covers: send it without trailers")

// refuseUnforwardable returns why r cannot be forwarded as it would be verified, before
// anything of it is verified (answered 400): a Connection header naming fields, which
// forwarding would drop (reverseproxy.CheckConnection); impersonation headers whose lines
// a signature does not pin down (httpsig.CheckImpersonation); declared trailers.
func refuseUnforwardable(r *http.Request) error {
	if err := reverseproxy.CheckConnection(r.Header); err != nil {
		return err
	}
	if err := httpsig.CheckImpersonation(r.Header); err != nil {
		return err
	}
	if len(r.Trailer) > 0 || len(r.Header.Values("Trailer")) > 0 {
		return errTrailer
	}
	return nil
}

// setHopFields sets on the outgoing request what describes the hop from the client, which
// the proxy knows and the signer cannot: X-Forwarded-For is the client's address alone,
// as kube-apiserver reads its audit sourceIPs from it (then X-Real-Ip, then the peer
// address, the proxy's). ReverseProxy has removed the client's X-Forwarded-* and
// Forwarded; X-Real-Ip is removed here, so no client names its own source address. A
// signature that covers one of them is refused at the wire (AlteredError), as the field
// does not reach kube-apiserver as signed. Trailers are dropped: no signature covers
// them, and a request declaring them was refused already.
func setHopFields(out *http.Request, remoteAddr string) {
	out.Header.Del("X-Real-Ip")
	out.Header.Del("X-Forwarded-For")
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		out.Header.Set("X-Forwarded-For", host)
	}
	out.Trailer = nil
}
