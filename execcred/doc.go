// Package execcred is a client runtime for Kubernetes exec credential plugins (KEP-541):
// it runs the plugin a kubeconfig's users[].user.exec names, exactly as client-go does, and
// authenticates HTTP requests with the token or client certificate the plugin returns.
//
// The pieces, from the plugin outward:
//
//   - Config describes one plugin: command, arguments, env, API version (v1, v1beta1 or the
//     original v1alpha1), interactive mode and the cluster it authenticates to.
//     FromRESTConfig builds one from a client-go *rest.Config loaded by clientcmd.
//   - Plugin runs the plugin once (through internal/execplugin) with the same
//     KUBERNETES_EXEC_INFO, environment and stdio client-go uses, and decodes its answer into
//     a Credential.
//   - Authenticator caches the credential until it expires, runs the plugin once for any
//     number of concurrent callers, refreshes after a 401, and optionally refreshes ahead of
//     expiry, backs off after failures and times plugins out.
//   - Transport is an http.RoundTripper that adds the credential to requests, and the
//     TLS client certificate hook and dialer that rotate connections when the certificate
//     changes. ConfigFor adapts a *rest.Config so that client-go uses all of this.
package execcred
