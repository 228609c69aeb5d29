package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	kjson "sigs.k8s.io/json"
)

// MaxFailureSize bounds the stdout a client reads as a Failure, once white space around it
// is trimmed: 1 MiB, client-go's bound. Larger output is not a Failure.
const MaxFailureSize = 1 << 20

// Failure is how a plugin that fails tells the user why: instead of an ExecCredential, it
// prints a metav1.Status on stdout (kind Status, apiVersion v1, status Failure) and exits
// non-zero. A client shows Message in place of "exited with code N"; Reason (CamelCase,
// e.g. Unauthorized) and Code (an HTTP status code) are for programs. The zero value has no
// message, so a client shows none.
//
// This follows client-go's proposal for kubernetes/kubernetes#139150 (pull requests #138769
// and #141915, the ExecPluginStatusError feature gate): stdout, not stderr, trimmed, at most
// 1 MiB, and the error is the status's message. Neither pull request was merged when this
// was written, so there is no upstream commit to follow: client-go v0.36.3 (44a8af2f) and
// client-go master at 32ce75a7 (2026-07-24, after v0.37.0-beta.0) have no such gate, and
// report only "exec: executable X failed with exit code N". Clients that do not read a
// Failure ignore stdout when a plugin fails, and show its stderr.
type Failure struct {
	Message string
	Reason  string
	Code    int32
}

// failureJSON is a metav1.Status as the API machinery writes it.
type failureJSON struct {
	Kind       string   `json:"kind"`
	APIVersion string   `json:"apiVersion"`
	Metadata   struct{} `json:"metadata"`
	Status     string   `json:"status,omitempty"`
	Message    string   `json:"message,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	Code       int32    `json:"code,omitempty"`
}

// Encode returns the metav1.Status a plugin prints for f, with a final newline.
func (f *Failure) Encode() ([]byte, error) {
	b, err := json.Marshal(failureJSON{Kind: "Status", APIVersion: "v1", Status: "Failure", Message: f.Message, Reason: f.Reason, Code: f.Code})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ParseFailure reads a failing plugin's stdout as a Failure: one JSON object of kind
// Status, with a message, of at most MaxFailureSize bytes once trimmed. Keys are
// case-sensitive, unknown fields and apiVersion are ignored. The error says why the output
// is not a Failure and never quotes it (a failing plugin may have printed a credential).
//
// kplug asks more than the proposed client-go code, which takes any metav1.Status it can
// decode: the kind, so that a half-written ExecCredential is never mistaken for an
// explanation, and a message, since without one there is nothing to show.
func ParseFailure(stdout []byte) (*Failure, error) {
	data := bytes.TrimSpace(stdout)
	switch {
	case len(data) == 0:
		return nil, errors.New("no output")
	case len(data) > MaxFailureSize:
		return nil, fmt.Errorf("%d bytes of output, more than the %d a status may have", len(data), MaxFailureSize)
	case data[0] != '{':
		return nil, errors.New("not a JSON object")
	}
	var s failureJSON
	dec := kjson.NewDecoderCaseSensitivePreserveInts(bytes.NewReader(data))
	if err := dec.Decode(&s); err != nil {
		return nil, errors.New("not a metav1.Status: it does not decode") // the decoder's error may quote the output
	}
	if dec.More() {
		return nil, errors.New("unexpected data after the status object")
	}
	if s.Kind != "Status" {
		return nil, errors.New(`not a metav1.Status: kind is not "Status"`)
	}
	if strings.TrimSpace(s.Message) == "" {
		return nil, errors.New("the status has no message")
	}
	return &Failure{Message: s.Message, Reason: s.Reason, Code: s.Code}, nil
}
