package sidecar_test

import (
	"fmt"

	"github.com/kplug/kplug/mvproxy/sidecar"
)

// New checks every option at once, before anything listens or talks to the apiserver:
// here a listen address peers cannot reach without an advertised one, an apiserver URL
// without TLS, and none of the clients, certificates and CAs the sidecar needs.
func ExampleNew() {
	_, err := sidecar.New(sidecar.Options{
		ID:            "kplug-peerproxy-a",
		ListenAddress: ":6444",
		LocalURL:      "http://10.0.0.11:6443",
	})
	fmt.Println(err)
	// Output:
	// sidecar: options: listen address ":6444" names no host peers could reach: Address is required
	// local apiserver URL "http://10.0.0.11:6443": want https://host:port
	// LocalClient and Client are required
	// PeerRootCAs, Identifier, GetServingCertificate and GetProxyClientCertificate are required
}
