// Package plugin is the SDK for exec credential plugins: a plugin is a Func, from what the
// client said (Info, read from KUBERNETES_EXEC_INFO: the API version it wants, whether it is
// interactive, the cluster) to a credential (wire.Status), and the pieces around it
// take care of the protocol:
//
//   - Main makes a Func the whole program (Run is one run, for tests and wrappers): it reads
//     KUBERNETES_EXEC_INFO with LoadInfo, calls the Func, and answers with Write in the
//     version the client asked for. A Func that fails with a *StatusError tells the user
//     why, on stdout, in the metav1.Status clients read (ExampleStatusError).
//   - Cache.Wrap is a decorator: it keeps the Func's answers in files, so that an expensive
//     login is not repeated by every kubectl invocation, and concurrent invocations wait
//     for one login (a file lock) instead of each starting their own. Cache.Do is the same
//     for code that is not a Func.
//   - execcred.FuncSource runs a Func in-process as an execcred.Source, so that a Go program
//     can use a plugin without a process, under execcred's decorators and transport, and
//     execcred.ClusterConfig turns the cluster a client sent into a client-go config.
//
// The package depends on execcred/wire, not on execcred or client-go, so that a plugin
// written with it starts as fast as Go allows (a client runs it on every command).
//
// Example_main is a complete plugin; Example_inProcess uses a Func in-process, as the
// source of execcred's pipeline (execcred.FuncSource).
package plugin
