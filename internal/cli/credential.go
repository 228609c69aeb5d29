package cli

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/execcache"
	"github.com/kplug/kplug/internal/output"
)

type credentialOptions struct {
	kubeconfig kubeconfigOptions
	output     string
	showToken  bool
}

func (o *credentialOptions) AddFlags(cmd *cobra.Command) {
	o.kubeconfig.AddFlags(cmd)
	addOutputFlag(cmd, &o.output, "the credential's summary")
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
For a user with an httpSignature block (KEP-6308), the signing key it returned (or its
key files hold): key ID, algorithm, certificate and signed headers, never the key.
Tokens and signed header values are redacted unless --show-token.`,
		Example: `  kplug credential --context prod
  kplug credential -o json --show-token | jq -r .token
  kplug credential --kubeconfig ~/.kube/eks.yaml -o yaml`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), g, cmd.OutOrStdout()) },
	}
	o.AddFlags(cmd)
	return cmd
}

// credentialSummary is the JSON output; it never holds a private key or a secret.
type credentialSummary struct {
	Command       string          `json:"command"`
	APIVersion    string          `json:"apiVersion,omitempty"`
	Kind          string          `json:"kind"`
	Token         string          `json:"token,omitempty"`
	Expiration    *time.Time      `json:"expirationTimestamp,omitempty"`
	Certificate   *certSummary    `json:"certificate,omitempty"`
	HTTPSignature *signingSummary `json:"httpSignature,omitempty"`
}

// signingSummary describes signing material: which key, never the key; the signed
// headers' values are redacted as tokens are (they may be session tokens).
type signingSummary struct {
	KeyID         string            `json:"keyID"`
	Algorithm     string            `json:"algorithm"`
	SignedHeaders map[string]string `json:"signedHeaders"`
}

type certSummary struct {
	Subject  string    `json:"subject"`
	Issuer   string    `json:"issuer"`
	NotAfter time.Time `json:"notAfter"`
}

func (o *credentialOptions) run(ctx context.Context, g *globals, out io.Writer) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	u, err := o.kubeconfig.load(g, "")
	if err != nil {
		return err
	}
	defer u.Close()
	cfg, h := u.cfg, u.opts.HTTPSignature
	switch {
	case h != nil:
		g.log.Debug("httpSignature: fetching signing material", "keyFiles", h.HasKeyFiles())
	case cfg.ExecProvider == nil:
		return invalidConfig(fmt.Errorf("the context's user has no exec credential plugin"))
	case execcred.HasStaticCredentials(cfg):
		g.log.Warn("the context's user also has static credentials; clients use those and never run the plugin")
	}
	// The user's source, whatever the plugin or the httpSignature block gives: one call.
	src, err := execcred.NewForRESTConfig(cfg, u.opts)
	if err != nil {
		return pluginFailed(err)
	}
	cred, err := src.Credential(ctx, nil)
	if err != nil {
		return pluginFailed(err)
	}
	command, apiVersion := "httpSignature key files", ""
	if p := cfg.ExecProvider; p != nil {
		command, apiVersion = p.Command, p.APIVersion
	}
	s := summarize(command, apiVersion, cred, o.showToken)
	if output.IsStructured(o.output) {
		return output.Write(out, o.output, s)
	}
	return printCredential(out, s, time.Now())
}

func summarize(command, apiVersion string, c *execcred.Credential, showToken bool) credentialSummary {
	s := credentialSummary{Command: command, APIVersion: apiVersion}
	switch {
	case c.HTTPSignature != nil:
		s.Kind = "httpSignature signing key"
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
	var leaf *x509.Certificate
	switch {
	case c.Certificate != nil:
		leaf = c.Certificate.Leaf
	case c.HTTPSignature != nil:
		leaf = c.HTTPSignature.Certificate
	}
	if leaf != nil {
		s.Certificate = &certSummary{Subject: subject(leaf), Issuer: leaf.Issuer.String(), NotAfter: leaf.NotAfter.UTC()}
	}
	if sg := c.HTTPSignature; sg != nil {
		s.HTTPSignature = &signingSummary{KeyID: sg.Signer.KeyID(), Algorithm: sg.Signer.Algorithm(), SignedHeaders: map[string]string{}}
		for name, value := range sg.Headers {
			s.HTTPSignature.SignedHeaders[name] = redact(value, showToken)
		}
	}
	return s
}

func printCredential(out io.Writer, s credentialSummary, now time.Time) error {
	if s.APIVersion != "" {
		fmt.Fprintf(out, "plugin:      %s (%s)\n", s.Command, s.APIVersion)
	} else {
		fmt.Fprintf(out, "source:      %s\n", s.Command)
	}
	fmt.Fprintf(out, "credential:  %s\n", s.Kind)
	if s.Token != "" {
		fmt.Fprintf(out, "token:       %s\n", s.Token)
	}
	if sg := s.HTTPSignature; sg != nil {
		fmt.Fprintf(out, "keyid:       %s\n", sg.KeyID)
		fmt.Fprintf(out, "algorithm:   %s\n", sg.Algorithm)
		for _, name := range slices.Sorted(maps.Keys(sg.SignedHeaders)) {
			fmt.Fprintf(out, "header:      %s: %s\n", name, sg.SignedHeaders[name])
		}
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
