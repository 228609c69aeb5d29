package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// deprecatedAlias adds old as a second name of cmd's flag current, sharing its value and
// hidden from --help: deployments written for the old name keep working, and each use
// says on stderr which name to use instead. (pflag's MarkDeprecated says it through
// cobra, which prints it on stdout, where only results go.)
func deprecatedAlias(cmd *cobra.Command, old, current string) {
	f := cmd.Flags()
	c := f.Lookup(current)
	if c == nil {
		panic(fmt.Sprintf("deprecatedAlias: no flag --%s", current))
	}
	f.AddFlag(&pflag.Flag{
		Name: old, Usage: c.Usage, DefValue: c.DefValue, NoOptDefVal: c.NoOptDefVal, Hidden: true,
		Value: &aliasValue{Value: c.Value, notice: func() {
			fmt.Fprintf(cmd.ErrOrStderr(), "Flag --%s has been deprecated, use --%s\n", old, current)
		}},
	})
}

// aliasValue is a flag's value under a deprecated name: setting it gives notice first.
type aliasValue struct {
	pflag.Value
	notice func()
}

func (v *aliasValue) Set(s string) error {
	v.notice()
	return v.Value.Set(s)
}
