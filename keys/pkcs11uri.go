package keys

import (
	"fmt"
	"strings"
)

// PKCS11URI is the part of an RFC 7512 PKCS#11 URI that selects a key: which module,
// which token, which object, and where the PIN comes from.
type PKCS11URI struct {
	Token, Serial string // token label or serial number; one is required
	Object        string // CKA_LABEL of the key
	ID            []byte // CKA_ID of the key; Object or ID is required
	ModulePath    string // query attribute module-path
	PINSource     string // query attribute pin-source: a file path (file: optional)
}

// ParsePKCS11URI parses s, e.g.
// "pkcs11:token=kplug;object=alice?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/run/pin".
// A pin-value attribute is refused: a PIN does not belong in a kubeconfig.
func ParsePKCS11URI(s string) (*PKCS11URI, error) {
	rest, ok := strings.CutPrefix(s, "pkcs11:")
	if !ok {
		return nil, fmt.Errorf("pkcs11: %q is not a pkcs11: URI", s)
	}
	path, query, _ := strings.Cut(rest, "?")
	s = "pkcs11:" + path // messages quote the URI without its query, where a pin-value may be
	u := &PKCS11URI{}
	seen := map[string]bool{}
	err := uriAttrs("pkcs11", s, path, ";", seen, func(name, value string) error {
		switch name {
		case "token":
			u.Token = value
		case "serial":
			u.Serial = value
		case "object":
			u.Object = value
		case "id":
			u.ID = []byte(value)
		case "type":
			if value != "private" {
				return fmt.Errorf("pkcs11: type=%s: the key URI must name a private key", value)
			}
		case "manufacturer", "model", "library-manufacturer", "library-description", "library-version", "slot-description", "slot-manufacturer", "slot-id":
			return fmt.Errorf("pkcs11: attribute %q is not supported; select the token with token= or serial=", name)
		default:
			return fmt.Errorf("pkcs11: unknown attribute %q", name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = uriAttrs("pkcs11", s, query, "&", seen, func(name, value string) error {
		switch name {
		case "module-path":
			u.ModulePath = value
		case "pin-source":
			u.PINSource = strings.TrimPrefix(value, "file:")
		case "pin-value":
			return fmt.Errorf("pkcs11: pin-value is refused: keep the PIN out of the kubeconfig with pin-source=file:PATH or $KPLUG_PKCS11_PIN")
		default:
			return fmt.Errorf("pkcs11: unknown query attribute %q", name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case u.Token == "" && u.Serial == "":
		return nil, fmt.Errorf("pkcs11: %q names no token: add token=LABEL or serial=", s)
	case u.Token != "" && u.Serial != "":
		return nil, fmt.Errorf("pkcs11: give token= or serial=, not both")
	case u.Object == "" && len(u.ID) == 0:
		return nil, fmt.Errorf("pkcs11: %q names no key: add object=LABEL or id=", s)
	}
	return u, nil
}

// tokenName says which token u selects, for messages.
func (u *PKCS11URI) tokenName() string {
	if u.Token != "" {
		return fmt.Sprintf("token %q", u.Token)
	}
	return fmt.Sprintf("token with serial %q", u.Serial)
}

// objectName says which key u selects, for messages.
func (u *PKCS11URI) objectName() string {
	if u.Object != "" {
		return fmt.Sprintf("object %q", u.Object)
	}
	return fmt.Sprintf("id %x", u.ID)
}
