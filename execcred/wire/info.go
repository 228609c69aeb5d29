package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Info is what a client tells a plugin in KUBERNETES_EXEC_INFO.
type Info struct {
	// APIVersion is the version the client expects the answer in.
	APIVersion  string
	Interactive bool
	// Cluster is set when the kubeconfig has provideClusterInfo (v1beta1 and v1).
	Cluster *Cluster
	// Response is set by v1alpha1 clients when the last credential was rejected.
	Response *Response
	// LockFilePath is set by clients that support exec proxies (KEP-2718, docs/exec-proxy.md):
	// the client holds an exclusive lock on this file while it lives, and a plugin that
	// answers with a proxy serves until it can take the lock.
	LockFilePath string
	// HTTPSignature is set by a client configured to sign requests (KEP-6308): the
	// plugin answers with status.httpSignature, satisfying it.
	HTTPSignature *HTTPSignatureRequest
	// FromClient is false when KUBERNETES_EXEC_INFO was empty: a very old client, or the
	// plugin run by hand. APIVersion is then v1beta1, which every client since 1.11 reads.
	FromClient bool
}

// LoadInfo parses the value of KUBERNETES_EXEC_INFO; an empty value gives an Info with
// FromClient false.
func LoadInfo(value string) (*Info, error) {
	if value == "" {
		return &Info{APIVersion: V1beta1}, nil
	}
	var in struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Spec       struct {
			Cluster       *Cluster              `json:"cluster"`
			Interactive   bool                  `json:"interactive"`
			Response      *Response             `json:"response"`
			LockFilePath  string                `json:"lockFilePath"`
			HTTPSignature *HTTPSignatureRequest `json:"httpSignature"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(value), &in); err != nil {
		return nil, fmt.Errorf("plugin: %s is not an ExecCredential: %w", InfoEnv, err)
	}
	if !KnownVersion(in.APIVersion) {
		return nil, fmt.Errorf("plugin: %s has unsupported apiVersion %q", InfoEnv, in.APIVersion)
	}
	if in.Kind != Kind {
		return nil, fmt.Errorf("plugin: %s has kind %q, want %s", InfoEnv, in.Kind, Kind)
	}
	return &Info{
		APIVersion:    in.APIVersion,
		Interactive:   in.Spec.Interactive,
		Cluster:       in.Spec.Cluster,
		Response:      in.Spec.Response,
		LockFilePath:  in.Spec.LockFilePath,
		HTTPSignature: in.Spec.HTTPSignature,
		FromClient:    true,
	}, nil
}

// specV1 is the spec of v1 and v1beta1: interactive is always present. lockFilePath is the
// exec proxy extension; client-go never sends it. httpSignature is KEP-6308's.
type specV1 struct {
	Cluster       *Cluster              `json:"cluster,omitempty"`
	Interactive   bool                  `json:"interactive"`
	LockFilePath  string                `json:"lockFilePath,omitempty"`
	HTTPSignature *HTTPSignatureRequest `json:"httpSignature,omitempty"`
}

// specV1alpha1 is the spec of the original design: interactive only when true, and the
// response to a rejected credential; httpSignature is KEP-6308's.
type specV1alpha1 struct {
	Response      *Response             `json:"response,omitempty"`
	Interactive   bool                  `json:"interactive,omitempty"`
	HTTPSignature *HTTPSignatureRequest `json:"httpSignature,omitempty"`
}

// Encode returns the KUBERNETES_EXEC_INFO value client-go would pass for i: compact JSON
// with kind, apiVersion and spec in that order, and a trailing newline. The cluster and
// lockFilePath are sent only for v1beta1 and v1; the response only for v1alpha1;
// httpSignature for every version.
func (i *Info) Encode() ([]byte, error) {
	in := ExecCredential{Kind: Kind, APIVersion: i.APIVersion}
	if i.APIVersion == V1alpha1 {
		in.Spec = specV1alpha1{Response: i.Response, Interactive: i.Interactive, HTTPSignature: i.HTTPSignature}
	} else {
		in.Spec = specV1{Cluster: i.Cluster, Interactive: i.Interactive, LockFilePath: i.LockFilePath, HTTPSignature: i.HTTPSignature}
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(in); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
