// Package server is the SDK for exec proxy plugins (KEP-2718, docs/exec-proxy.md): exec
// credential plugins that answer with a proxy on a private unix socket, which forwards the
// client's API traffic to the API server and may change each request on the way (add a
// header, sign it) or authenticate upstream with its own TLS client certificate.
//
// A plugin is a Func: from the client's Request to the Options to serve it with. Its main
// function is one call, Main(f), and the SDK does the protocol:
//
//	KUBERNETES_EXEC_INFO --Run--> Request (spec.cluster, spec.lockFilePath, arguments)
//	    --f--> Options --launcher--> daemon (arguments on stdin) --Serve--> answer on stdout
//
// Run reads the client's request once and refuses a client without a lock file. The
// launcher (the process the client ran) calls f only to check the plugin's arguments,
// then starts its own executable again as a detached daemon, hands it the arguments on
// stdin (a command line is readable by every local user), and relays the daemon's answer;
// the daemon calls f to serve, and prints the ExecCredential once the proxy listens. A
// plugin may instead be its own proxy (Process without DaemonArgs).
//
// Serve is the proxy itself: mutual TLS on the socket with an ephemeral CA (pki.go), the
// client's lock watched so that the proxy exits with its client (even one killed with
// SIGKILL) or after Options.IdleTimeout without connections, and an
// httputil.ReverseProxy upstream that sends upgrades (exec, attach, port-forward) over
// HTTP/1.1 and streams watches at once. Options.ModifyRequest and GetClientCertificate
// are where a plugin plugs in; execproxy/sigv4 and httpsig have the signers, and package keys
// the hardware-backed client certificate, that kplug's own plugin uses. The client side is package execproxy.
package server
