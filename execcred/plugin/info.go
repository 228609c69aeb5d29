package plugin

import (
	"encoding/json"
	"errors"
	"io"

	"github.com/kplug/kplug/execcred/wire"
)

// Info is what the client told the plugin (package wire documents it).
type Info = wire.Info

// LoadInfo parses the value of KUBERNETES_EXEC_INFO. Pass os.Getenv(wire.InfoEnv).
func LoadInfo(value string) (*Info, error) { return wire.LoadInfo(value) }

// Write prints status as an ExecCredential in the version the client asked for.
func Write(w io.Writer, info *Info, status *wire.Status) error {
	if status == nil || (status.Token == "" && status.ClientCertificateData == "") {
		return errors.New("plugin: a credential needs a token or a client certificate")
	}
	out := wire.ExecCredential{Kind: wire.Kind, APIVersion: info.APIVersion, Spec: struct{}{}, Status: status}
	enc := json.NewEncoder(w)
	return enc.Encode(out)
}
