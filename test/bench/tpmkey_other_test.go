//go:build !linux

package bench

import (
	"errors"
	"testing"
)

func tpmKeys(testing.TB, ...string) ([]string, error) {
	return nil, errors.New("the TPM rows need swtpm, on Linux")
}
