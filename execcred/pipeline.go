package execcred

import (
	"crypto"
	"log/slog"
	"time"

	"github.com/kplug/kplug/execplugin"
)

// Options choose what New puts in the standard pipeline beyond client-go's behaviour. The
// zero value behaves like client-go, with refresh-ahead on.
type Options struct {
	// Plugin says how the plugin is run (NewPlugin).
	Plugin PluginOptions
	// RefreshBefore is WithRefreshAhead's Before; zero means DefaultRefreshBefore, negative
	// leaves it out.
	RefreshBefore time.Duration
	// Backoff and MaxBackoff are WithBackoff's Initial and Max; a zero Backoff leaves it out
	// (client-go runs a failing plugin on every request).
	Backoff, MaxBackoff time.Duration
	// Metrics, if set, records client-go's exec plugin metrics.
	Metrics *Metrics
	// Logger receives refresh failures that are not returned to a caller; nil discards.
	Logger *slog.Logger
	// Now is the clock of every piece; nil means time.Now.
	Now func() time.Time
	// HTTPSignature is the kubeconfig user's httpSignature block (KEP-6308,
	// LoadHTTPSignature). When set, NewForRESTConfig's source gives the block's signing
	// material instead of a token or a certificate.
	HTTPSignature *HTTPSignature
	// OpenKey opens an httpSignature keyFile that is a URI rather than a file name, such
	// as pkcs11: (keys.OpenSigner does); the caller closes what it opened when done. nil
	// means PEM key files only: execcred links no PKCS#11 library.
	OpenKey func(uri string) (crypto.Signer, error)
}

// New validates cfg and composes the standard pipeline, from the plugin outward:
//
//	Plugin                       runs the plugin (PluginOptions: runner, terminal, timeout)
//	Metrics.ObserveCredentials   if Metrics: certificate TTL and rotation, exec proxies
//	Backoff                      if Backoff > 0: no run until the backoff after a failure
//	WithCache                    one run for concurrent callers; kept until expiry or a 401
//	WithRefreshAhead             unless RefreshBefore < 0: replaced in the background
//
// Metrics.ObserveCall is set on a copy of Plugin.Runner to count runs, and
// Metrics.ObservePolicy as Plugin.ObservePolicy. Put the result in a
// Transport (HTTPTransport, ConfigFor); its Credential method is what Transport calls.
func New(cfg Config, o Options) (Source, error) {
	host := o.Plugin
	if o.Metrics != nil {
		runner := execplugin.Runner{}
		if host.Runner != nil {
			runner = *host.Runner
		}
		runner.Observe = o.Metrics.ObserveCall
		host.Runner = &runner
		host.ObservePolicy = o.Metrics.ObservePolicy
	}
	plugin, err := NewPlugin(cfg, host)
	if err != nil {
		return nil, err
	}
	var src Source = plugin
	if o.Metrics != nil {
		src = o.Metrics.ObserveCredentials(src)
	}
	if o.Backoff > 0 {
		src = WithBackoff(src, BackoffOptions{Initial: o.Backoff, Max: o.MaxBackoff, Now: o.Now})
	}
	src = WithCache(src, CacheOptions{Now: o.Now})
	if o.RefreshBefore >= 0 {
		src = WithRefreshAhead(src, RefreshAheadOptions{Before: o.RefreshBefore, Logger: o.Logger, Now: o.Now})
	}
	return src, nil
}
