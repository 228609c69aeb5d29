// Package execproxy is the client side of exec proxies (KEP-2718, docs/exec-proxy.md): a
// client holds a lock file for as long as it lives and passes its path to the exec plugin
// (spec.lockFilePath); the plugin answers with status.proxyConfig, a unix socket and the CA
// of a proxy that forwards to the API server, plus a client certificate for that hop.
//
// Connect is the whole client side in one call, for any *rest.Config: it takes the lock,
// runs the plugin through execcred's pipeline, and returns a Session whose Config (for
// client-go) and Transport (for plain HTTP) are right for whatever the plugin answered:
// nothing to run, a token, a client certificate, or a proxy. The pieces it is built from
// are exported for clients that need them separately:
//
//   - Lock (NewLock, in RuntimeDir) is the lock file the proxy watches.
//   - Bridge makes the proxy's socket reachable by every dial path of client-go and of
//     unmodified clients such as kubectl: an HTTP CONNECT endpoint on loopback that tunnels
//     each connection to the socket, so that REST calls, watches, SPDY and WebSocket
//     upgrades all go through the proxy with end-to-end mutual TLS. It admits only clients
//     that send its secret, which its ProxyURL carries, since every local user can reach a
//     loopback port.
//   - ConfigFor builds the *rest.Config that reaches the API server through the proxy, and
//     Kubeconfig the matching kubeconfig for unmodified clients (kplug run).
package execproxy
