package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kplug/kplug/internal/version"
)

type versionOptions struct {
	output string
}

func (o *versionOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text or json")
}

func newVersionCommand(g *globals) *cobra.Command {
	o := &versionOptions{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print kplug's version and the Kubernetes version it is tested against",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, g)
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func (o *versionOptions) run(cmd *cobra.Command, _ *globals) error {
	info := version.Get()
	out := cmd.OutOrStdout()
	switch o.output {
	case "text":
		_, err := fmt.Fprintf(out, "kplug: %s\ngo: %s\nplatform: %s\nkubernetes: %s (tested against)\n",
			info.Kplug, info.Go, info.Platform, info.Kubernetes)
		return err
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	return &usageError{err: fmt.Errorf("invalid --output %q: want text or json", o.output), showHelp: true}
}
