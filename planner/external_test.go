package planner

import (
	"bytes"
	"errors"
	"log/slog"
	"regexp"
	"testing"

	"evals.si/internal/loglevel"
	"evals.si/spec"
)

// Starting a harness the worker runs says so as a notice (the CLI shows
// notices by default), and again when it is ready with how long it took: a
// first `go run` compiles for minutes. Info, which the CLI hides, would
// leave that silent.
func TestStartNotice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ext   spec.External
		err   error
		lines []string
	}{
		{"go run", spec.External{Command: []string{"go", "run", "../../harness/examples/gofixcalc"}}, nil, []string{
			`level=NOTICE msg="building external harness go run ../../harness/examples/gofixcalc \(first run compiles; cached after\)"`,
			`level=NOTICE msg="external harness go run ../../harness/examples/gofixcalc ready after \d+(\.\d+)?m?s" took=`,
		}},
		{"binary", spec.External{Command: []string{"./harness"}}, nil, []string{
			`level=NOTICE msg="starting external harness ./harness"`,
			`level=NOTICE msg="external harness ./harness ready after`,
		}},
		{"python fails", spec.External{Python: "probe_harness:ProbeHarness"}, errors.New("exited"), []string{
			`level=NOTICE msg="starting external harness probe_harness:ProbeHarness"`,
			`level=NOTICE msg="external harness probe_harness:ProbeHarness did not start \(after`,
		}},
		{"address", spec.External{Address: "127.0.0.1:1"}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			startNotice(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: loglevel.Notice, ReplaceAttr: loglevel.ReplaceAttr})), tc.ext)(tc.err)
			got := regexp.MustCompile(`(?m)^.+$`).FindAllString(buf.String(), -1)
			if len(got) != len(tc.lines) {
				t.Fatalf("%d lines, want %d:\n%s", len(got), len(tc.lines), buf.String())
			}
			for i, re := range tc.lines {
				if !regexp.MustCompile(re).MatchString(got[i]) {
					t.Errorf("line %d = %s\nwant %s", i+1, got[i], re)
				}
			}
		})
	}
}
