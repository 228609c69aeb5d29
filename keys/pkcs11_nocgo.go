//go:build !cgo

package keys

import "errors"

func openPKCS11(*PKCS11URI, Options) (Source, error) {
	return nil, errors.New("pkcs11: this kplug was built without cgo, which PKCS#11 modules need; build it with CGO_ENABLED=1 and a C compiler")
}
