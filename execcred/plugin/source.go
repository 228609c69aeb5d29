package plugin

import (
	"context"
	"fmt"

	"github.com/kplug/kplug/execcred"
)

// Source adapts f to an execcred.Source, so that a program can use a plugin in-process,
// with no process to run: each call of Credential is one call of f, whose answer is checked
// as a client checks a plugin's output. f is told info on every call, as a client would
// tell it in KUBERNETES_EXEC_INFO (an empty APIVersion means v1), and, when asked to
// replace a credential the server rejected, the server's answer in Response, as a v1alpha1
// client sends it. FromClient is true. Put the source under execcred's decorators like any
// other.
func Source(f Func, info Info) execcred.Source {
	if info.APIVersion == "" {
		info.APIVersion = execcred.V1
	}
	info.FromClient = true
	return execcred.SourceFunc(func(ctx context.Context, rejected *execcred.Rejection) (*execcred.Credential, error) {
		in := info
		if rejected != nil {
			in.Response = rejected.Response
		}
		status, err := f(ctx, &in)
		if err != nil {
			return nil, err
		}
		if status == nil {
			return nil, fmt.Errorf("plugin: the plugin function returned no credential")
		}
		cred, err := execcred.FromStatus(status)
		if err != nil {
			return nil, fmt.Errorf("plugin: %w", err)
		}
		return cred, nil
	})
}
