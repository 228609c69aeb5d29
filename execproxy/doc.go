// Package execproxy is the client side of exec proxies (KEP-2718, docs/exec-proxy.md): a
// client holds a lock file for as long as it lives and passes its path to the exec plugin
// (spec.lockFilePath); the plugin answers with status.proxyConfig, a unix socket and the CA
// of a proxy that forwards to the API server, plus a client certificate for that hop.
//
// Bridge makes the socket reachable by every dial path of client-go and of unmodified
// clients such as kubectl: it is an HTTP CONNECT endpoint on loopback that tunnels each
// connection to the socket, so that REST calls, watches, SPDY and WebSocket upgrades all
// go through the proxy with end-to-end mutual TLS. It admits only clients that send its
// secret, which its ProxyURL carries, since every local user can reach a loopback port. ConfigFor builds the matching
// *rest.Config and Kubeconfig the matching kubeconfig.
package execproxy
