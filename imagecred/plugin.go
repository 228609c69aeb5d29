package imagecred

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	kubeletv1 "k8s.io/kubelet/config/v1"

	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/imagecred/plugin"
)

// DefaultTimeout bounds one plugin run, as the kubelet's hard-coded minute does.
const DefaultTimeout = time.Minute

// PluginOptions configures NewPlugin.
type PluginOptions struct {
	// BinDir holds the plugin binaries; a provider runs BinDir/name.
	BinDir string
	// Timeout bounds each run; zero means DefaultTimeout. On timeout the plugin's process
	// group is killed.
	Timeout time.Duration
	// Stderr receives what the plugin writes to stderr; nil discards it (the tail is still
	// part of errors).
	Stderr io.Writer
	// StderrShown says that Stderr reaches whoever reads the errors Provide returns:
	// their messages then leave the stderr tail out (execplugin.Runner.StderrShown).
	StderrShown bool
	// Environ is the plugin's base environment; nil means the process's.
	Environ func() []string
	// Metrics, if set, observes every run (the kubelet's duration and errors metrics).
	Metrics *Metrics
}

// Plugin is the Provider that runs a provider plugin as the kubelet does: BinDir/name with the
// configured args, the host environment with the configured env on top, the
// CredentialProviderRequest on stdin in the provider's apiVersion (byte for byte the
// kubelet's encoding), and the response decoded strictly and checked. It caches nothing:
// wrap it. Create one with NewPlugin; it is safe for concurrent use.
type Plugin struct {
	path       string
	apiVersion string
	args       []string
	env        []string
	timeout    time.Duration
	runner     *execplugin.Runner
}

// NewPlugin finds the provider's binary as the kubelet does at startup (exec.LookPath, which
// on Windows also tries name.exe), but names the path in its errors. c is not validated:
// see Config.Validate.
func NewPlugin(c kubeletv1.CredentialProvider, o PluginOptions) (*Plugin, error) {
	path, err := checkBinary(c.Name, filepath.Join(o.BinDir, c.Name))
	if err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	env := make([]string, 0, len(c.Env))
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	runner := &execplugin.Runner{Environ: o.Environ, Stderr: o.Stderr, StderrShown: o.StderrShown}
	if o.Metrics != nil {
		runner.Observe = o.Metrics.provider(c.Name).observeRun
	}
	return &Plugin{path: path, apiVersion: c.APIVersion, args: c.Args, env: env, timeout: o.Timeout, runner: runner}, nil
}

// checkBinary returns the path to run for a provider, or why it cannot run. It decides as
// the kubelet does at startup (exec.LookPath, which on Windows also finds name.exe), and
// says why in the words of execplugin's check, which kplug credential makes too; that
// check also wants a regular file.
func checkBinary(name, path string) (string, error) {
	found, err := exec.LookPath(path)
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, exec.ErrNotFound):
		return "", fmt.Errorf("imagecred: provider %q: plugin binary executable %s did not exist", name, path)
	case err == nil:
		path = found
	}
	abs, aerr := filepath.Abs(path) // absolute: a bare name would be looked up in PATH
	if aerr == nil {
		if _, rerr := execplugin.Resolve(abs, ""); rerr != nil {
			return "", fmt.Errorf("imagecred: provider %q: %w", name, rerr)
		}
	}
	if err != nil {
		return "", fmt.Errorf("imagecred: provider %q: error inspecting binary executable %s: %w", name, path, err)
	}
	return found, nil
}

// CheckBinaries checks, as the kubelet does when it starts, that binDir exists and holds
// for each provider of c a binary it can run: one that exists, is a regular file and is
// executable. It returns every problem found, joined, in provider order.
func (c *Config) CheckBinaries(binDir string) error {
	if err := checkBinDir(binDir); err != nil {
		return err
	}
	var errs []error
	for _, p := range c.Providers {
		if _, err := checkBinary(p.Name, filepath.Join(binDir, p.Name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Path is the plugin binary.
func (e *Plugin) Path() string { return e.path }

// Provide runs the plugin once. Its errors are execplugin's typed errors (*ExitError,
// *TimeoutError...), the kubelet's decoding errors, which never quote the response, or
// ErrInvalidCacheKeyType.
func (e *Plugin) Provide(ctx context.Context, req *Request) (*Response, error) {
	var (
		token       string
		annotations map[string]string
	)
	if sa := req.ServiceAccount; sa != nil {
		token, annotations = sa.Token, sa.Annotations
	}
	stdin, err := encodeRequest(e.apiVersion, req.Image, token, annotations)
	if err != nil {
		return nil, err
	}
	res, err := e.runner.Run(ctx, execplugin.Command{
		Path:    e.path,
		Args:    e.args,
		Env:     e.env,
		Stdin:   execplugin.BytesStdin(stdin),
		Timeout: e.timeout,
	})
	if err != nil {
		return nil, err
	}
	wire, err := decodeResponse(e.apiVersion, res.Stdout)
	if err != nil {
		return nil, err
	}
	resp := &Response{
		CacheKeyType: plugin.CacheKeyType(wire.CacheKeyType),
		Auth:         make(map[string]AuthConfig, len(wire.Auth)),
	}
	if wire.CacheDuration != nil {
		resp.CacheDuration = &wire.CacheDuration.Duration
	}
	for k, v := range wire.Auth {
		resp.Auth[k] = AuthConfig{Username: v.Username, Password: v.Password}
	}
	if err := checkResponse(resp); err != nil {
		return nil, err
	}
	return resp, nil
}
