package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kplug/kplug/internal/output"
	"github.com/kplug/kplug/internal/version"
)

type versionOptions struct {
	output string
}

func (o *versionOptions) AddFlags(cmd *cobra.Command) {
	addOutputFlag(cmd, &o.output, "the version")
}

func newVersionCommand(g *globals) *cobra.Command {
	o := &versionOptions{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print kplug's version and the Kubernetes version it is tested against",
		Long: `version prints kplug's version: the one stamped by make release, or else the module
version go install recorded (v1.2.3 for go install github.com/kplug/kplug/cmd/kplug@v1.2.3),
or devel for a build from a checkout.`,
		Example: `  kplug version
  kplug version -o json | jq -r .kplug
  kubectl kplug version   # installed as kubectl-kplug, a kubectl plugin (krew)`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, g)
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func (o *versionOptions) run(cmd *cobra.Command, _ *globals) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	info := version.Get()
	out := cmd.OutOrStdout()
	if output.IsStructured(o.output) {
		return output.Write(out, o.output, info)
	}
	_, err := fmt.Fprintf(out, "kplug: %s\ngo: %s\nplatform: %s\nkubernetes: %s (tested against)\n",
		info.Kplug, info.Go, info.Platform, info.Kubernetes)
	return err
}
