// Package wire is the ExecCredential wire format of client.authentication.k8s.io (v1alpha1,
// v1beta1 and v1): the KUBERNETES_EXEC_INFO a client sends a plugin (Info, LoadInfo,
// Info.Encode) and the answer a plugin prints (Status, Decode), checked by client-go's rules.
//
// It depends on nothing but the standard library and sigs.k8s.io/json and yaml, so that a
// program that only speaks the format (a plugin, `kplug exec-cache`) starts in a
// millisecond: Go runs the initialisation of every package a binary links, and client-go's
// API machinery alone costs several. The runtime (package execcred) uses these types under
// the same names.
package wire
