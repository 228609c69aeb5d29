package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
)

type requestOptions struct {
	kubeconfig kubeconfigOptions
	method     string
	data       string
}

func (o *requestOptions) AddFlags(cmd *cobra.Command) {
	o.kubeconfig.AddFlags(cmd)
	cmd.Flags().StringVarP(&o.method, "request", "X", "", "HTTP method (default: GET, or POST with --data)")
	cmd.Flags().StringVarP(&o.data, "data", "d", "", "request body: DATA, @FILE, or - for stdin")
}

func newRequestCommand(g *globals) *cobra.Command {
	o := &requestOptions{}
	cmd := &cobra.Command{
		Use:   "request PATH",
		Short: "Make one authenticated request to the API server through kplug's client runtime",
		Long: `Make one request to the context's API server with the whole client runtime: the exec
credential plugin (cached, refreshed ahead of expiry, refreshed and retried once after a
401), TLS settings and proxy-url. A user with an httpSignature block (KEP-6308) signs the
request in process instead, with its key files or its plugin's key. The response body
goes to stdout; a status other than 2xx is reported on stderr and exits 1.`,
		Example: `  kplug request /api/v1/namespaces/default/pods
  kplug request -X POST -d @ns.json /api/v1/namespaces
  kplug request /apis/authentication.k8s.io/v1/selfsubjectreviews -d '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), g, args[0], cmd.OutOrStdout())
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func (o *requestOptions) run(ctx context.Context, g *globals, path string, out io.Writer) error {
	if !strings.HasPrefix(path, "/") {
		return &usageError{err: fmt.Errorf("PATH %q must start with /", path), showHelp: true}
	}
	body, err := o.body(g.io.In)
	if err != nil {
		return err
	}
	stdinUse := ""
	if o.data == "-" {
		stdinUse = "used by the request body (--data -)"
	}
	u, err := o.kubeconfig.load(g, stdinUse)
	if err != nil {
		return err
	}
	defer u.Close()
	cfg := u.cfg
	rt, done, err := transport(ctx, g, u)
	if err != nil {
		return err
	}
	defer done()
	method := o.method
	if method == "" {
		method = http.MethodGet
		if body != nil {
			method = http.MethodPost
		}
	}
	req, err := newAPIRequest(ctx, cfg, method, path, body)
	if err != nil {
		return err
	}
	g.log.Debug("request", "method", method, "url", req.URL.String())
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(out, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return nil
}

// transport authenticates requests as the context's user, whatever its credential (an
// exec plugin's token, certificate or proxy, or an httpSignature block): one session.
// Call done after the request.
func transport(ctx context.Context, g *globals, u *user) (rt http.RoundTripper, done func(), err error) {
	session, err := u.connect(ctx, g)
	if err != nil {
		return nil, nil, err
	}
	if rt, err = session.Transport(); err != nil {
		if !session.Proxied() {
			err = invalidConfig(err) // the kubeconfig's TLS settings
		}
		session.Close()
		return nil, nil, err
	}
	return rt, session.Close, nil
}

func (o *requestOptions) body(stdin io.Reader) ([]byte, error) {
	switch {
	case o.data == "":
		return nil, nil
	case o.data == "-":
		return io.ReadAll(stdin)
	case strings.HasPrefix(o.data, "@"):
		b, err := os.ReadFile(o.data[1:])
		if err != nil {
			return nil, invalidConfig(fmt.Errorf("--data: %w", err))
		}
		return b, nil
	}
	return []byte(o.data), nil
}

func newAPIRequest(ctx context.Context, cfg *rest.Config, method, path string, body []byte) (*http.Request, error) {
	url := strings.TrimSuffix(cfg.Host, "/") + cfg.APIPath + path
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return nil, &usageError{err: err, showHelp: true}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, */*")
	return req, nil
}

func stdinFile(g *globals) *os.File {
	f, _ := g.io.In.(*os.File)
	return f
}
