// Package cmdline holds what evalsi and evalsid share on top of cobra: the
// flag spellings Go's flag package accepted, and one-line usage errors.
// Each binary wraps these errors in its own usage error (exit 2).
package cmdline

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// NormalizeArgs keeps the spellings Go's flag package accepted, which
// scripts and manifests already use, working under pflag: a long flag with
// one dash (-json, -store=PATH) becomes --json, --store=PATH, and a
// one-letter flag with two dashes (--f, --v) becomes -f, -v. Only names the
// command actually has are rewritten, and nothing after "--" or in a
// flag's value.
func NormalizeArgs(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		cmd = root
	}
	flags := pflag.NewFlagSet("", pflag.ContinueOnError)
	flags.AddFlagSet(cmd.LocalFlags())
	flags.AddFlagSet(cmd.InheritedFlags())
	// takesValue reports whether f, given without "=value", consumes the
	// next argument.
	takesValue := func(f *pflag.Flag, hasValue bool) bool { return f != nil && !hasValue && f.NoOptDefVal == "" }
	out := make([]string, 0, len(args))
	valueNext := false
	for i, a := range args {
		if valueNext {
			out = append(out, a)
			valueNext = false
			continue
		}
		if a == "--" {
			return append(out, args[i:]...)
		}
		switch {
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			if len(name) == 1 {
				if f := flags.ShorthandLookup(name); f != nil {
					a = a[1:]
					valueNext = takesValue(f, hasValue)
				}
			} else {
				valueNext = takesValue(flags.Lookup(name), hasValue)
			}
		case strings.HasPrefix(a, "-") && len(a) > 2:
			name, _, hasValue := strings.Cut(a[1:], "=")
			if f := flags.Lookup(name); f != nil {
				a = "-" + a
				valueNext = takesValue(f, hasValue)
			}
		case strings.HasPrefix(a, "-") && len(a) == 2:
			valueNext = takesValue(flags.ShorthandLookup(a[1:]), false)
		}
		out = append(out, a)
	}
	return out
}

// UnknownCommand is the error for an argument that names no subcommand of
// cmd, in one line with a hint (cobra's own message spans several).
func UnknownCommand(cmd *cobra.Command, arg string) error {
	hint := ""
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(arg); len(s) > 0 {
		hint = fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return fmt.Errorf("unknown command %q for %q%s; commands: %s; see `%s --help`", arg, cmd.CommandPath(), hint, SubcommandNames(cmd), cmd.CommandPath())
}

// NeedSubcommand is the error of a command that only groups others, run
// without one.
func NeedSubcommand(cmd *cobra.Command) error {
	name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
	return fmt.Errorf("%s needs a subcommand: %s; see `%s --help`", name, SubcommandNames(cmd), cmd.CommandPath())
}

// NoArgs is the error for positional arguments given to a command that
// takes none; nil when there are none.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return fmt.Errorf("%s takes no arguments, got %q; see `%s --help`", cmd.CommandPath(), args, cmd.CommandPath())
}

// FlagError adds the hint to a flag that does not parse.
func FlagError(cmd *cobra.Command, err error) error {
	return fmt.Errorf("%w; see `%s --help`", err, cmd.CommandPath())
}

// SubcommandNames lists cmd's subcommands, comma-separated.
func SubcommandNames(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return strings.Join(names, ", ")
}

// NewRoot is a binary's root command: errors and usage are not printed by
// cobra (the binary prints its own one-line error and picks the exit
// code), an unknown subcommand or an unparsable flag is passed through
// usage (the binary's usage-error wrapper) with a hint, and *ran is set
// once a command's own code starts, so an error before it is a usage error.
func NewRoot(use, short, long string, stdout, stderr io.Writer, usage func(error) error) (*cobra.Command, *bool) {
	ran := new(bool)
	root := &cobra.Command{
		Use:           use,
		Short:         short,
		Long:          long,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			return usage(UnknownCommand(cmd, args[0]))
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return usage(NeedSubcommand(cmd)) },
		PersistentPreRun: func(*cobra.Command, []string) {
			*ran = true
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usage(FlagError(c, err)) })
	return root, ran
}
