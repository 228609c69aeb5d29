package execcred

import "github.com/kplug/kplug/execcred/wire"

// The API group of ExecCredential and the versions this package speaks (package wire).
const (
	Group    = wire.Group
	V1       = wire.V1
	V1beta1  = wire.V1beta1
	V1alpha1 = wire.V1alpha1 // removed from client-go in 1.24; supported here
	Kind     = wire.Kind
)

// InfoEnv is the environment variable carrying the ExecCredential input to the plugin.
const InfoEnv = wire.InfoEnv

// The wire types, under the runtime's names so that a program using the runtime needs one
// import; package wire documents them.
type (
	// Cluster is wire.Cluster: what a plugin learns about the cluster.
	Cluster = wire.Cluster
	// Response is wire.Response: the 401 a v1alpha1 client reports.
	Response = wire.Response
	// Status is wire.Status: the plugin's answer.
	Status = wire.Status
	// Failure is wire.Failure: why a failing plugin says it failed.
	Failure = wire.Failure
	// ProxyConfig is wire.ProxyConfig: where an exec proxy listens.
	ProxyConfig = wire.ProxyConfig
	// ExecCredential is wire.ExecCredential: the wire object.
	ExecCredential = wire.ExecCredential
	// Time is wire.Time: a timestamp as metav1.Time writes it.
	Time = wire.Time
)

func knownVersion(v string) bool { return wire.KnownVersion(v) }
