package execcred

import (
	"bytes"
	"encoding/json"
)

// ExecInfo encodes the KUBERNETES_EXEC_INFO value client-go would pass: compact JSON with
// kind, apiVersion and spec in that order, and a trailing newline. cluster is sent only for
// v1beta1 and v1; response only for v1alpha1.
func ExecInfo(apiVersion string, interactive bool, cluster *Cluster, response *Response) ([]byte, error) {
	return execInfo(apiVersion, interactive, cluster, response, "")
}

// execInfo adds lockFilePath (v1beta1 and v1), which a client that supports exec proxies
// sends; see docs/exec-proxy.md.
func execInfo(apiVersion string, interactive bool, cluster *Cluster, response *Response, lockFilePath string) ([]byte, error) {
	in := ExecCredential{Kind: Kind, APIVersion: apiVersion}
	if apiVersion == V1alpha1 {
		in.Spec = specV1alpha1{Response: response, Interactive: interactive}
	} else {
		in.Spec = specV1{Cluster: cluster, Interactive: interactive, LockFilePath: lockFilePath}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(in); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
