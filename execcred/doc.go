// Package execcred is a client runtime for Kubernetes exec credential plugins (KEP-541):
// it runs the plugin a kubeconfig's users[].user.exec names, exactly as client-go does, and
// authenticates HTTP requests with the token or client certificate the plugin returns.
//
// Data flows through four layers, from the kubeconfig to the wire:
//
//  1. Configuration. Config describes one plugin (command, arguments, env, API version:
//     v1, v1beta1 or the original v1alpha1, interactive mode, cluster); FromRESTConfig
//     builds one from a client-go *rest.Config loaded by clientcmd. It is validated once,
//     when a Plugin is made. Its Policy is the credential plugin policy of kubectl's
//     kuberc (package execcred/kuberc reads it; SetPolicy puts it on a *rest.Config, as
//     kubectl does).
//  2. Source. A Source has one method, Credential(ctx, rejected), in the spirit of
//     oauth2.TokenSource. Plugin is the exec-backed source: each call checks the policy,
//     runs the plugin once (through execplugin) with client-go's KUBERNETES_EXEC_INFO,
//     environment and stdio, and decodes its answer into a Credential. FuncSource runs a
//     plugin function in-process instead. SourceFunc adapts any function.
//  3. Decorators, each a Source wrapping a Source: WithCache keeps the credential until it
//     expires or the server rejects it, with one run for any number of concurrent callers
//     and one cancellation policy (see WithCache); WithRefreshAhead replaces it in the background
//     before it expires; WithBackoff stops a failing plugin from running on every request;
//     Metrics.ObserveCredentials (and Metrics.ObserveCall, the runner's hook) record
//     client-go's exec plugin metrics.
//  4. Transport. Transport is the http.RoundTripper that adds the bearer token, asks for a
//     new credential after a 401 (and retries once if asked), and presents the client
//     certificate to the TLS layer below it, closing the connections it dialled when the
//     certificate changes. HTTPTransport builds one for a *rest.Config; ConfigFor adapts a
//     *rest.Config so that every transport client-go builds from it carries the token.
//     For a credential with signing material (KEP-6308, Credential.HTTPSignature) it signs
//     each request instead, with no token and no client certificate; a kubeconfig user's
//     httpSignature block (LoadHTTPSignature) gives that material from key files or from
//     the exec plugin (Options.HTTPSignature).
//
// New composes the standard pipeline (what client-go does, plus refresh-ahead, and
// backoff, metrics and a timeout when asked); the Example composes it by hand.
//
// Errors say what failed, on which plugin: Plugin's are *PluginError, unwrapping to
// execplugin's typed errors (*execplugin.ExitError, *execplugin.NotFoundError,
// *execplugin.TimeoutError, ...), to a *kuberc.DeniedError, or to the decoding error;
// WithBackoff's are *BackoffError. A plugin that fails may say why, with a metav1.Status on
// stdout (wire.Failure): its message is then the error's, through a *StatusError.
package execcred
