package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox/docker"
	"evals.si/sandbox/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// TestReportRuns keeps the benchmark command working: a few trials both
// ways, every line of the report present. It checks no figure: the
// benchmark measures, the test only runs it.
func TestReportRuns(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "the benchmark runs its trials on the bwrap rung")
	}
	if p := docker.New().Probe(context.Background()); !p.Works {
		testenv.Missing(t, "docker", p.Reason)
	}
	for _, tc := range []struct {
		name       string
		o          options
		want, lack []string
	}{
		{"same-n", options{n: 4, dockerN: 4, concurrency: 2},
			[]string{"docker 4 trials wall", "throughput vs docker harness"}, []string{"extrapolated from"}},
		{"extrapolated", options{n: 4, dockerN: 2, concurrency: 2},
			[]string{"docker 4 trials wall (extrapolated from 2)"}, nil},
		{"chatty-no-docker", options{n: 3, concurrency: 3, chattyKB: 2048},
			[]string{"skipped (-docker-n 0)", "chatty: each trial's command printed 2048 KiB"}, []string{"docker harness wall/trial"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := run(context.Background(), tc.o, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			report := out.String()
			// The table is aligned with spaces; compare on single ones.
			flat := strings.Join(strings.Fields(strings.ReplaceAll(report, "\t", " ")), " ")
			for _, w := range append([]string{"0 errored, 0 failed the checker", "1000 trials wall (extrapolated)", "engine overhead/step (mean)", "peak RSS (engine process)"}, tc.want...) {
				w = strings.Join(strings.Fields(strings.ReplaceAll(w, "\t", " ")), " ")
				if !strings.Contains(flat, w) {
					t.Errorf("report lacks %q:\n%s", w, report)
				}
			}
			for _, l := range tc.lack {
				if strings.Contains(report, l) {
					t.Errorf("report has %q:\n%s", l, report)
				}
			}
		})
	}
}
