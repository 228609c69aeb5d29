package oskeyring

import (
	"context"
	"errors"
	"fmt"

	gokeyring "github.com/zalando/go-keyring"
)

// keychain is the user's login Keychain, through go-keyring, which runs /usr/bin/security:
// the secret goes to `security -i` on its standard input, never in its arguments, so no
// other process sees it in a process list; reads come back on its standard output.
// Items are generic passwords with the service and the account; Keychain Access shows
// them under the service name.
type keychain struct{ service string }

func open(_ context.Context, name string, cfg *Config) (Keyring, error) {
	switch name {
	case Auto, Keychain:
		return &keychain{service: cfg.Service}, nil
	case SecretService, Kernel, CredentialManager:
		return nil, fmt.Errorf("oskeyring: the %s keyring is not on macOS; use %s (the Keychain)", name, Auto)
	}
	return nil, fmt.Errorf("oskeyring: unknown keyring %q", name)
}

func (k *keychain) Name() string   { return Keychain }
func (k *keychain) ItemLimit() int { return keychainItemLimit }
func (k *keychain) Close() error   { return nil }

func (k *keychain) Set(_ context.Context, it Item) error {
	if err := gokeyring.Set(k.service, it.Account, string(it.Secret)); err != nil {
		if errors.Is(err, gokeyring.ErrSetDataTooBig) {
			err = fmt.Errorf("%w: %v", ErrTooBig, err)
		}
		return &Error{Keyring: Keychain, Op: "storing " + it.Account, Err: err}
	}
	return nil
}

func (k *keychain) Get(_ context.Context, account string) ([]byte, error) {
	s, err := gokeyring.Get(k.service, account)
	if errors.Is(err, gokeyring.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, &Error{Keyring: Keychain, Op: "reading " + account, Err: err}
	}
	return []byte(s), nil
}

func (k *keychain) Delete(_ context.Context, account string) error {
	err := gokeyring.Delete(k.service, account)
	if err != nil && !errors.Is(err, gokeyring.ErrNotFound) {
		return &Error{Keyring: Keychain, Op: "deleting " + account, Err: err}
	}
	return nil
}
