package execcred

import "github.com/kplug/kplug/execcred/wire"

// ExecInfo encodes the KUBERNETES_EXEC_INFO value client-go would pass: compact JSON with
// kind, apiVersion and spec in that order, and a trailing newline. cluster is sent only for
// v1beta1 and v1; response only for v1alpha1.
func ExecInfo(apiVersion string, interactive bool, cluster *Cluster, response *Response) ([]byte, error) {
	i := wire.Info{APIVersion: apiVersion, Interactive: interactive, Cluster: cluster, Response: response}
	return i.Encode()
}
