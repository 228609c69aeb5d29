// Package server is the SDK for exec proxy plugins (KEP-2718, docs/exec-proxy.md): Serve
// listens on a private unix socket with an ephemeral CA and mutual TLS, and forwards the
// client's API traffic to the API server described by KUBERNETES_EXEC_INFO, letting the
// plugin modify each request and present its own TLS client certificate upstream.
//
// Serve returns when its context ends, when the client that started it is gone (the
// client's lock on Options.LockFilePath is released, even by SIGKILL), or after
// Options.IdleTimeout without connections.
package server
