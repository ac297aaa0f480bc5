package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestHelpAndFlagSpellings: each role's --help is its own usage and exits
// 0; Go flag's one-dash spelling still parses; unknown commands and flags
// are usage errors (exit 2) in one line.
func TestHelpAndFlagSpellings(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string // in stdout
		err  string // in stderr
	}{
		{[]string{"--help"}, 0, "Usage:\n  evalsid", ""},
		{[]string{"help", "worker"}, 0, "Usage:\n  evalsid worker --server URL", ""},
		{[]string{"model-server", "--help"}, 0, "Usage:\n  evalsid model-server --script SCRIPT.yaml", ""},
		{[]string{"sandbox", "--help"}, 0, "Usage:\n  evalsid sandbox", ""},
		{[]string{"sandbox", "probe", "-h"}, 0, "Usage:\n  evalsid sandbox probe", ""},
		{[]string{"sandboxd", "--help"}, 0, "--pod-namespace", ""},
		{[]string{"operator", "--help"}, 0, "--leader-elect", ""},
		{[]string{"serve", "--help"}, 0, "Usage:\n  evalsid serve --config server.yaml", ""},
		{[]string{"worker", "--help"}, 0, "--sandbox-address", ""},
		{[]string{"completion", "fish"}, 0, "complete -c evalsid", ""},
		{[]string{"sandbox"}, 2, "", "sandbox needs a subcommand: probe"},
		{[]string{"sandbox", "prob"}, 2, "", `did you mean "probe"?`},
		{[]string{"serve", "--config"}, 2, "", "flag needs an argument: --config; see `evalsid serve --help`"},
		{[]string{"worker", "extra"}, 2, "", "takes no arguments"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.err) {
			t.Errorf("evalsid %v: exit %d (want %d)\nstdout: %s\nstderr: %s\nwant %q / %q", c.args, code, c.code, out.String(), errb.String(), c.out, c.err)
		}
		if c.code == 2 && strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
			t.Errorf("evalsid %v: the usage error is not one line:\n%s", c.args, errb.String())
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"sandbox", "probe", "-json"}, &out, &bytes.Buffer{}); code != 0 || !json.Valid(out.Bytes()) {
		t.Errorf("sandbox probe -json: exit %d\n%s", code, out.String())
	}
}
