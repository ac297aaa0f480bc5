package main

import (
	"errors"
	"io/fs"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"evals.si/internal/cmdline"
)

// subcommandArgs refuses an argument that names no subcommand of cmd.
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return &usageError{cmdline.UnknownCommand(cmd, args[0])}
}

// needSubcommand is the RunE of a command that only groups others.
func needSubcommand(cmd *cobra.Command, args []string) error {
	return &usageError{cmdline.NeedSubcommand(cmd)}
}

// exactArgs wants n positional arguments, else the usage error msg.
func exactArgs(n int, msg string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s; see `%s --help`", msg, cmd.CommandPath())
		}
		return nil
	}
}

// noArgs refuses positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if err := cmdline.NoArgs(cmd, args); err != nil {
		return &usageError{err}
	}
	return nil
}

// storeMustExist refuses a --store naming no file, for the commands that
// only read a store: opening it would create an empty one and answer as if
// it held no runs, hiding a mistyped path. The default store (path "") is
// left alone.
func storeMustExist(path string) error {
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return usagef("no store at %s; run `evalsi run` first or pass --store", path)
	}
	return nil
}

// addStoreFlag registers --store.
func addStoreFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "store", "", "store database `PATH` (default: the user's data directory)")
}
