package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/kplug/kplug/execcred/wire"
)

// Info is what the client told the plugin (package wire documents it).
type Info = wire.Info

// LoadInfo parses the value of KUBERNETES_EXEC_INFO. Pass os.Getenv(wire.InfoEnv).
func LoadInfo(value string) (*Info, error) { return wire.LoadInfo(value) }

// Write prints status as an ExecCredential in the version the client asked for, after
// checking it as the client will: a token, a client certificate and key, or signing
// material (status.HTTPSignature, KEP-6308) that the client asked for in
// info.HTTPSignature, never signing material beside a credential that transits.
func Write(w io.Writer, info *Info, status *wire.Status) error {
	switch {
	case status == nil || status.Token == "" && status.ClientCertificateData == "" && status.HTTPSignature == nil:
		return errors.New("plugin: a credential needs a token, a client certificate or signing material")
	case status.HTTPSignature != nil && info.HTTPSignature == nil:
		return errors.New("plugin: the client did not ask for signing material (spec.httpSignature), so it could not use status.httpSignature")
	}
	if _, err := status.Check(); err != nil {
		return fmt.Errorf("plugin: %w", err)
	}
	out := wire.ExecCredential{Kind: wire.Kind, APIVersion: info.APIVersion, Spec: struct{}{}, Status: status}
	enc := json.NewEncoder(w)
	return enc.Encode(out)
}
