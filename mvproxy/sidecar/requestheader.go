package sidecar

import (
	"errors"

	"github.com/kplug/kplug/internal/requestheader"
)

// RequestHeaderError is Serve's refusal to forward users to a kube-apiserver that may read
// identity from header names the sidecar does not remove from clients' requests (a
// client could name any user or group through them), or that does not read the ones it
// sets: the X-Remote-* of mvproxy.SetIdentityHeaders. The names are those of the ConfigMap
// kube-system/extension-apiserver-authentication, which holds every name any
// kube-apiserver of the cluster ever published.
type RequestHeaderError struct {
	// Flag is kube-apiserver's flag (the ConfigMap key) whose names do not fit.
	Flag string
	// Names are its names, as the ConfigMap lists them; Want the sidecar's.
	Names []string
	Want  string
	// Unknown are the names other than Want: kube-apiserver may read identity from them,
	// and the sidecar neither sets nor removes them. Empty when only Want is missing.
	Unknown []string
}

func (e *RequestHeaderError) Error() string {
	return (&requestheader.MismatchError{Proxy: sidecarProxy, Flag: e.Flag, Names: e.Names, Want: []string{e.Want}, Unknown: e.Unknown}).Error()
}

var sidecarProxy = requestheader.Proxy{Name: "the sidecar", Server: "the local kube-apiserver"}

// notChecked is the answer while the sidecar has not checked the names; it names no
// address.
const notChecked = "peerproxy: not forwarding until it has read which identity headers the local kube-apiserver reads from front proxies"

// newHeaderGate checks the names the local kube-apiserver publishes against the X-Remote-*
// the sidecar sets and removes.
func newHeaderGate(o *Options) *requestheader.Gate {
	return requestheader.NewGate(requestheader.GateOptions{
		Client: o.Client, Names: requestheader.Default, Interval: o.RequestHeaderRefresh, Logger: o.Logger,
		Ready: requestheader.Readyz(o.LocalClient, o.LocalURL),
		Proxy: sidecarProxy, Refusal: notChecked,
		Forbidden: "the sidecar's user may not get ConfigMap " + requestheader.Namespace + "/" + requestheader.ConfigMapName +
			": bind it to the Role extension-apiserver-authentication-reader in " + requestheader.Namespace + " (docs/peerproxy-rbac.yaml)",
		Unauthorized: "kube-apiserver does not accept the sidecar's credentials (--kubeconfig)",
	})
}

// asRequestHeaderError returns err's *requestheader.MismatchError as a *RequestHeaderError,
// or err.
func asRequestHeaderError(err error) error {
	var m *requestheader.MismatchError
	if !errors.As(err, &m) {
		return err
	}
	return &RequestHeaderError{Flag: m.Flag, Names: m.Names, Want: m.Want[0], Unknown: m.Unknown}
}
