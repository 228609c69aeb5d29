//go:build !cgo

package bench

import (
	"errors"
	"testing"
)

func pkcs11Key(*testing.B, *clientCA, string) (string, string, error) {
	return "", "", errors.New("PKCS#11 needs cgo")
}
