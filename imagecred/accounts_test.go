package imagecred

import (
	"context"
	"os"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// fakeAccounts is an in-memory ServiceAccounts that hands out a new token per request and
// counts calls. The real one is tested against kube-apiserver in test/e2e.
type fakeAccounts struct {
	mu       sync.Mutex
	accounts map[string]*ServiceAccount
	gets     int
	tokens   []TokenRequest
}

func newFakeAccounts() *fakeAccounts { return &fakeAccounts{accounts: map[string]*ServiceAccount{}} }

func (a *fakeAccounts) add(ns, name, uid string, annotations map[string]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.accounts[ns+"/"+name] = &ServiceAccount{UID: types.UID(uid), Annotations: annotations}
}

func (a *fakeAccounts) ServiceAccount(_ context.Context, ns, name string) (*ServiceAccount, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gets++
	sa, ok := a.accounts[ns+"/"+name]
	if !ok {
		return nil, os.ErrNotExist
	}
	return sa, nil
}

func (a *fakeAccounts) Token(_ context.Context, req TokenRequest) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tokens = append(a.tokens, req)
	return "token-" + string(req.PodUID) + "-" + string(rune('a'+len(a.tokens)-1)), nil
}

func (a *fakeAccounts) tokenRequests() []TokenRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]TokenRequest(nil), a.tokens...)
}
