package keys

import (
	"fmt"
	"strconv"
	"strings"
)

// TPMURI selects a key held by a TPM 2.0: a TSS2 key file or a persistent handle, on which
// TPM, and where its auth value comes from.
//
// No standard names a TPM key the way RFC 7512 names a PKCS#11 one, so the syntax follows
// the pkcs11: URIs kplug already takes: attributes that select the key in the path
// (separated by ";"), and where to reach it and its secret in the query (separated by "&"),
// with pin-source spelled as in RFC 7512 so that a kubeconfig reads the same for both.
// A plain path to a "TSS2 PRIVATE KEY" PEM file (as tpm2-openssl, tpm2-tss-engine and
// tpm2_encodeobject write it) needs no URI at all: Open recognises the file.
type TPMURI struct {
	File      string // path attribute file: a TSS2 PRIVATE KEY PEM file
	Handle    uint32 // path attribute handle: a persistent handle, 0x81000000 to 0x81FFFFFF
	Device    string // query attribute device: the TPM device or a swtpm socket; default DefaultTPMDevice
	PINSource string // query attribute pin-source: a file holding the key's auth value (file: optional)
}

// ParseTPMURI parses s, e.g. "tpm:handle=0x81000001?device=/dev/tpmrm0&pin-source=file:/run/pin"
// or "tpm:file=/etc/kplug/alice.tss2?device=/dev/tpmrm0". Exactly one of file and handle
// is required. A pin-value attribute is refused, as in a pkcs11: URI.
func ParseTPMURI(s string) (*TPMURI, error) {
	rest, ok := strings.CutPrefix(s, "tpm:")
	if !ok {
		return nil, fmt.Errorf("tpm: %q is not a tpm: URI", s)
	}
	path, query, _ := strings.Cut(rest, "?")
	s = "tpm:" + path
	u := &TPMURI{}
	seen := map[string]bool{}
	err := uriAttrs("tpm", s, path, ";", seen, func(name, value string) error {
		switch name {
		case "file":
			u.File = strings.TrimPrefix(value, "file:")
		case "handle":
			hex, ok := strings.CutPrefix(strings.ToLower(value), "0x")
			h, err := strconv.ParseUint(hex, 16, 32)
			if !ok || err != nil || h>>24 != 0x81 {
				return fmt.Errorf("tpm: handle=%s: want a persistent handle, 0x81000000 to 0x81FFFFFF", value)
			}
			u.Handle = uint32(h)
		default:
			return fmt.Errorf("tpm: unknown attribute %q", name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = uriAttrs("tpm", s, query, "&", seen, func(name, value string) error {
		switch name {
		case "device":
			u.Device = value
		case "pin-source":
			u.PINSource = strings.TrimPrefix(value, "file:")
		case "pin-value":
			return fmt.Errorf("tpm: pin-value is refused: keep the auth value out of the kubeconfig with pin-source=file:PATH or $KPLUG_TPM_PIN")
		default:
			return fmt.Errorf("tpm: unknown query attribute %q", name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case u.File == "" && u.Handle == 0:
		return nil, fmt.Errorf("tpm: %q names no key: add file=PATH or a persistent handle=0x81NNNNNN", s)
	case u.File != "" && u.Handle != 0:
		return nil, fmt.Errorf("tpm: give file= or handle=, not both")
	}
	return u, nil
}

// keyName says which key u selects, for messages.
func (u *TPMURI) keyName() string {
	if u.File != "" {
		return "TPM key file " + u.File
	}
	return fmt.Sprintf("TPM key 0x%08x", u.Handle)
}
