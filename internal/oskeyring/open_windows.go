package oskeyring

import (
	"context"
	"errors"
	"fmt"

	gokeyring "github.com/zalando/go-keyring"
)

// credentialManager is the Windows Credential Manager, through go-keyring (wincred):
// generic credentials whose target is "SERVICE:ACCOUNT", as `cmdkey /list` shows them.
type credentialManager struct{ service string }

func open(_ context.Context, name string, cfg *Config) (Keyring, error) {
	switch name {
	case Auto, CredentialManager:
		return &credentialManager{service: cfg.Service}, nil
	case SecretService, Kernel, Keychain:
		return nil, fmt.Errorf("oskeyring: the %s keyring is not on Windows; use %s (the Credential Manager)", name, Auto)
	}
	return nil, fmt.Errorf("oskeyring: unknown keyring %q", name)
}

func (k *credentialManager) Name() string   { return CredentialManager }
func (k *credentialManager) ItemLimit() int { return credentialManagerItemLimit }
func (k *credentialManager) Close() error   { return nil }

func (k *credentialManager) Set(_ context.Context, it Item) error {
	if err := gokeyring.Set(k.service, it.Account, string(it.Secret)); err != nil {
		if errors.Is(err, gokeyring.ErrSetDataTooBig) {
			err = fmt.Errorf("%w: %v", ErrTooBig, err)
		}
		return &Error{Keyring: CredentialManager, Op: "storing " + it.Account, Err: err}
	}
	return nil
}

func (k *credentialManager) Get(_ context.Context, account string) ([]byte, error) {
	s, err := gokeyring.Get(k.service, account)
	if errors.Is(err, gokeyring.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, &Error{Keyring: CredentialManager, Op: "reading " + account, Err: err}
	}
	return []byte(s), nil
}

func (k *credentialManager) Delete(_ context.Context, account string) error {
	err := gokeyring.Delete(k.service, account)
	if err != nil && !errors.Is(err, gokeyring.ErrNotFound) {
		return &Error{Keyring: CredentialManager, Op: "deleting " + account, Err: err}
	}
	return nil
}
