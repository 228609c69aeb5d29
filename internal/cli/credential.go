package cli

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/execcache"
)

type credentialOptions struct {
	kubeconfig kubeconfigOptions
	output     string
	showToken  bool
}

func (o *credentialOptions) AddFlags(cmd *cobra.Command) {
	o.kubeconfig.AddFlags(cmd)
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	cmd.Flags().BoolVar(&o.showToken, "show-token", false, "print the token itself instead of a redacted form")
}

func newCredentialCommand(g *globals) *cobra.Command {
	o := &credentialOptions{}
	cmd := &cobra.Command{
		Use:   "credential",
		Short: "Run the context's exec credential plugin as a client would and show what it returned",
		Long: `Run the exec credential plugin of a kubeconfig context exactly as client-go would
(same KUBERNETES_EXEC_INFO, environment, stdin and stderr), and show the credential it
returned: its kind, its expiry and, for a client certificate, its subject and NotAfter.
Tokens are redacted unless --show-token.`,
		Example: `  kplug credential --context prod
  kplug credential -o json --show-token | jq -r .token`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), g, cmd.OutOrStdout()) },
	}
	o.AddFlags(cmd)
	return cmd
}

// credentialSummary is the JSON output; it never holds a private key.
type credentialSummary struct {
	Command     string       `json:"command"`
	APIVersion  string       `json:"apiVersion"`
	Kind        string       `json:"kind"`
	Token       string       `json:"token,omitempty"`
	Expiration  *time.Time   `json:"expirationTimestamp,omitempty"`
	Certificate *certSummary `json:"certificate,omitempty"`
}

type certSummary struct {
	Subject  string    `json:"subject"`
	Issuer   string    `json:"issuer"`
	NotAfter time.Time `json:"notAfter"`
}

func (o *credentialOptions) run(ctx context.Context, g *globals, out io.Writer) error {
	if o.output != "text" && o.output != "json" {
		return &usageError{err: fmt.Errorf("invalid --output %q: want text or json", o.output), showHelp: true}
	}
	cfg, err := o.kubeconfig.restConfig(g)
	if err != nil {
		return err
	}
	if cfg.ExecProvider == nil {
		return invalidConfig(fmt.Errorf("the context's user has no exec credential plugin"))
	}
	if execcred.HasStaticCredentials(cfg) {
		g.log.Warn("the context's user also has static credentials; clients use those and never run the plugin")
	}
	src, err := execcred.NewForRESTConfig(cfg, o.kubeconfig.credentialOptions(g, ""))
	if err != nil {
		return invalidConfig(err)
	}
	g.log.Debug("running exec plugin", "command", cfg.ExecProvider.Command)
	cred, err := src.Credential(ctx, nil)
	if err != nil {
		return pluginFailed(err)
	}
	s := summarize(cfg.ExecProvider.Command, cfg.ExecProvider.APIVersion, cred, o.showToken)
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	return printCredential(out, s, time.Now())
}

func summarize(command, apiVersion string, c *execcred.Credential, showToken bool) credentialSummary {
	s := credentialSummary{Command: command, APIVersion: apiVersion}
	switch {
	case c.Token != "" && c.Certificate != nil:
		s.Kind = "token and client certificate"
	case c.Certificate != nil:
		s.Kind = "client certificate"
	default:
		s.Kind = "token"
	}
	if c.Token != "" {
		s.Token = redact(c.Token, showToken)
	}
	if !c.Expiry.IsZero() {
		exp := c.Expiry.UTC()
		s.Expiration = &exp
	}
	if c.Certificate != nil {
		s.Certificate = &certSummary{Subject: subject(c.Certificate.Leaf), Issuer: c.Certificate.Leaf.Issuer.String(), NotAfter: c.Certificate.Leaf.NotAfter.UTC()}
	}
	return s
}

func printCredential(out io.Writer, s credentialSummary, now time.Time) error {
	fmt.Fprintf(out, "plugin:      %s (%s)\n", s.Command, s.APIVersion)
	fmt.Fprintf(out, "credential:  %s\n", s.Kind)
	if s.Token != "" {
		fmt.Fprintf(out, "token:       %s\n", s.Token)
	}
	if s.Expiration != nil {
		fmt.Fprintf(out, "expires:     %s (%s)\n", s.Expiration.Format(time.RFC3339), execcache.Relative(*s.Expiration, now))
	} else {
		fmt.Fprintf(out, "expires:     never (kept until the server rejects it)\n")
	}
	if c := s.Certificate; c != nil {
		fmt.Fprintf(out, "subject:     %s\n", c.Subject)
		fmt.Fprintf(out, "issuer:      %s\n", c.Issuer)
		_, err := fmt.Fprintf(out, "not after:   %s (%s)\n", c.NotAfter.Format(time.RFC3339), execcache.Relative(c.NotAfter, now))
		return err
	}
	return nil
}

// redact keeps only a token's length.
func redact(token string, show bool) string {
	if show {
		return token
	}
	return fmt.Sprintf("<redacted, %d bytes>", len(token))
}

func subject(c *x509.Certificate) string {
	s := "CN=" + c.Subject.CommonName
	for _, o := range c.Subject.Organization {
		s += ",O=" + o
	}
	return s
}
