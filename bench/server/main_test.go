package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// TestBenchRuns keeps the benchmark command working: a few trials each
// way through embedded mode and through a real evalsid serve with two
// workers on the bench's own PostgreSQL, printed as the table and as
// JSON. It checks no figure: the benchmark measures, the test only runs it.
func TestBenchRuns(t *testing.T) {
	if _, err := pgBinDir(); err != nil {
		testenv.Missing(t, "PostgreSQL", err.Error())
	}
	if _, err := exec.LookPath("go"); err != nil {
		testenv.Missing(t, "go", "the bench builds evalsid")
	}
	agent := true
	if _, err := exec.LookPath("bwrap"); err != nil {
		// The model trial needs no sandbox; the agent trial is run where
		// it can be, and must be under EVALSI_STRICT=1.
		if testenv.Strict() {
			t.Fatal("bwrap is missing (EVALSI_STRICT=1): the agent trial runs on the bwrap rung")
		}
		agent = false
	}
	for _, tc := range []struct {
		name string
		o    options
		skip bool
	}{
		{"model-table", options{trials: 6, reps: 2, trial: "model", workers: 2}, false},
		{"agent-json", options{trials: 4, reps: 1, trial: "agent", workers: 2, json: true}, !agent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skip {
				t.Skip("bwrap is missing")
			}
			o := tc.o
			if err := o.check(); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := run(context.Background(), o, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			if o.json {
				var r report
				if err := json.Unmarshal(out.Bytes(), &r); err != nil {
					t.Fatalf("the -json output does not decode: %v\n%s", err, out.String())
				}
				if len(r.Reps) != o.reps || r.Median.Embedded.Trials != o.trials || r.Median.Server.Trials != o.trials {
					t.Errorf("want %d repetitions of %d trials each way, got %+v", o.reps, o.trials, r)
				}
				if r.Median.Probe.GetRunCalls == 0 || r.Median.Server.TrialsPerSec <= 0 || r.Median.Ratio <= 0 {
					t.Errorf("the server run or the prober measured nothing: %+v", r.Median)
				}
				return
			}
			report := out.String()
			flat := strings.Join(strings.Fields(report), " ")
			for _, w := range []string{"trial: " + o.trial, "median", "ratio server/embedded", "API p99 while running",
				"PostgreSQL write transactions per trial", "2 workers, PostgreSQL own cluster, durable"} {
				if !strings.Contains(flat, w) {
					t.Errorf("report lacks %q:\n%s", w, report)
				}
			}
			if got := strings.Count(report, "\n"); got < 10 {
				t.Errorf("report has %d lines:\n%s", got, report)
			}
		})
	}
}
