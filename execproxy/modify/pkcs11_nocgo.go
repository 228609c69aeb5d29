//go:build !cgo

package modify

import "errors"

func openPKCS11(*PKCS11URI, KeyOptions) (KeySource, error) {
	return nil, errors.New("pkcs11: this kplug was built without cgo, which PKCS#11 modules need; build it with CGO_ENABLED=1 and a C compiler")
}
