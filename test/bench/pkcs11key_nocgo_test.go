//go:build !cgo

package bench

import (
	"errors"
	"testing"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

func pkcs11Key(*testing.B, *testpki.CA, string) (string, string, error) {
	return "", "", errors.New("PKCS#11 needs cgo")
}
