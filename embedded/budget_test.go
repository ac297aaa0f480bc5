package embedded

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/engine"
	"evals.si/modelserver"
	"evals.si/report"
	"evals.si/spec"
	"evals.si/store"
)

// pricedServer is the scripted model server answering every call with
// 50,000 input and 12,500 output tokens: on gpt-4.1 ($2 / $8 per million)
// each trial costs $0.10 + $0.10 = $0.20.
func pricedServer(t *testing.T) (*modelserver.Server, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := modelserver.New(&spec.Script{Default: []spec.ScriptReply{{Content: "4", InputTokens: 50_000, OutputTokens: 12_500}}}, nil)
	addr, err := srv.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return srv, "http://" + addr.String() + "/v1"
}

const trialUSD = 0.20

// budgetSpec is a plain eval of 3 records × 2 trials, one at a time, on
// the priced server; budget is the spec's top-level budget YAML ("" for
// none).
func budgetSpec(t *testing.T, baseURL, budget string) *spec.File {
	t.Helper()
	y := "name: budget-unit\ntrials: 2\nconcurrency: 1\ndataset:\n  records:\n" +
		"    - {id: a, input: \"2+2?\", expected: \"4\"}\n" +
		"    - {id: b, input: \"1+3?\", expected: \"4\"}\n" +
		"    - {id: c, input: \"0+4?\", expected: \"4\"}\n" +
		"target:\n  connector: openai\n  model: gpt-4.1\n  base_url: " + baseURL + "\n  api_key_env: EVALSI_BUDGET_TEST_KEY\n" +
		"evaluators: [exact-match]\n"
	if budget != "" {
		y += "budget: " + budget + "\n"
	}
	f, err := spec.Parse("budget.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

func openBudgetApp(t *testing.T) *App {
	t.Helper()
	dir := t.TempDir()
	a, err := Open(context.Background(), Options{StorePath: filepath.Join(dir, "evalsi.db"), StateDir: filepath.Join(dir, "state"),
		Getenv: func(k string) string {
			if k == "EVALSI_BUDGET_TEST_KEY" {
				return "not-secret"
			}
			return ""
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// trialStatuses counts the run's trials by stored status.
func trialStatuses(t *testing.T, a *App, runID string) map[string]int {
	t.Helper()
	trials, err := a.Store().ListTrials(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, tr := range trials {
		n[tr.Status]++
	}
	return n
}

// The spec's budget stops the run after the trial whose cost reaches it;
// the rest stay pending, the run and its summary say so, a resume under
// the same cap starts nothing, and a resume with a higher cap completes
// the run.
func TestBudgetStopsRunAndResumeCompletes(t *testing.T) {
	ctx := context.Background()
	srv, base := pricedServer(t)
	a := openBudgetApp(t)
	f := budgetSpec(t, base, "{usd: 0.50}")

	sum, err := a.Run(ctx, f, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// $0.20, $0.40 (below the cap: the next starts), $0.60: stop.
	if sum.Status != engine.StatusInterrupted || sum.NotStarted != 3 || sum.Stopped != "budget $0.50 reached" || sum.Aggregate.TrialsRun != 3 {
		t.Fatalf("summary: status %s, not started %d, stopped %q, trials run %d", sum.Status, sum.NotStarted, sum.Stopped, sum.Aggregate.TrialsRun)
	}
	if got, want := sum.Label(), "stopped: budget $0.50 reached, 3 trials not started"; got != want {
		t.Errorf("label %q, want %q", got, want)
	}
	if !near(sum.CostUSDInclRetries, 3*trialUSD) || sum.Records != 3 || sum.Trials != 2 {
		t.Errorf("summary spend $%v over %d records × %d trials, want $0.60 over 3 × 2", sum.CostUSDInclRetries, sum.Records, sum.Trials)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("the model server got %d calls, want 3 (one per trial started)", n)
	}
	var table strings.Builder
	if err := report.WriteTable(&table, sum); err != nil {
		t.Fatal(err)
	}
	if want := "stopped: budget $0.50 reached, 3 trials not started; resume with a higher cap: evalsi runs resume " + sum.RunID + " --max-cost USD\n"; !strings.Contains(table.String(), want) {
		t.Errorf("the summary table lacks %q:\n%s", want, table.String())
	}
	run, err := a.Store().GetRun(ctx, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	wantErr := "stopped: budget $0.50 reached, 3 trials not started; resume with a higher cap: evalsi runs resume " + sum.RunID + " --max-cost USD"
	if run.Status != store.RunInterrupted || run.Error != wantErr {
		t.Errorf("stored run: status %s, error %q\nwant interrupted, %q", run.Status, run.Error, wantErr)
	}
	if got := trialStatuses(t, a, sum.RunID); got[store.TrialFinished] != 3 || got[store.TrialPending] != 3 {
		t.Errorf("stored trials %v, want 3 finished and 3 pending", got)
	}

	// The same cap: the run's earlier spend counts, nothing starts.
	again, err := a.Resume(ctx, sum.RunID, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Status != engine.StatusInterrupted || again.NotStarted != 3 || len(srv.Requests()) != 3 {
		t.Fatalf("resume under the same cap: status %s, not started %d, %d model calls", again.Status, again.NotStarted, len(srv.Requests()))
	}

	// A higher cap runs the rest.
	done, err := a.Resume(ctx, sum.RunID, RunOptions{MaxCostUSD: 5})
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != engine.StatusCompleted || done.NotStarted != 0 || done.Stopped != "" || done.Aggregate.TrialsRun != 6 || done.Scores["exact-match"] != 1 {
		t.Fatalf("resume with --max-cost 5: status %s, not started %d, stopped %q, trials run %d, scores %v",
			done.Status, done.NotStarted, done.Stopped, done.Aggregate.TrialsRun, done.Scores)
	}
	if !near(done.CostUSDInclRetries, 6*trialUSD) || done.Label() != engine.StatusCompleted || len(srv.Requests()) != 6 {
		t.Errorf("completed run: spend $%v, label %q, %d model calls; want $1.20, completed, 6", done.CostUSDInclRetries, done.Label(), len(srv.Requests()))
	}
	if got := trialStatuses(t, a, sum.RunID); got[store.TrialFinished] != 6 {
		t.Errorf("stored trials %v, want 6 finished", got)
	}
}

// Each cap stops the run where its spend reaches it; --max-cost overrides
// the spec's usd; a cap the whole run fits in changes nothing.
func TestBudgetCaps(t *testing.T) {
	srv, base := pricedServer(t)
	for _, tc := range []struct {
		name, budget string
		maxCost      float64
		started      int
		stopped      string
	}{
		{"none", "", 0, 6, ""},
		{"usd", "{usd: 0.30}", 0, 2, "budget $0.30 reached"},
		{"max-cost overrides usd", "{usd: 0.30}", 0.50, 3, "budget $0.50 reached"},
		{"max-cost alone", "", 0.10, 1, "budget $0.10 reached"},
		// 62,500 tokens a trial: 125,000 after two, 187,500 after three.
		{"tokens", "{tokens: 150000}", 0, 3, "budget 150000 tokens reached"},
		{"wall clock already over", "{wall_clock: 1ns}", 0, 0, "wall_clock 1ns reached"},
		{"the run fits exactly", "{usd: 1.20}", 0, 6, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(srv.Requests())
			sum, err := openBudgetApp(t).Run(context.Background(), budgetSpec(t, base, tc.budget), RunOptions{MaxCostUSD: tc.maxCost})
			if err != nil {
				t.Fatal(err)
			}
			calls := len(srv.Requests()) - before
			if sum.Aggregate.TrialsRun != tc.started || calls != tc.started || sum.Stopped != tc.stopped || sum.NotStarted != 6-tc.started {
				t.Fatalf("trials run %d (%d model calls), stopped %q, not started %d; want %d, %q, %d",
					sum.Aggregate.TrialsRun, calls, sum.Stopped, sum.NotStarted, tc.started, tc.stopped, 6-tc.started)
			}
			wantStatus := engine.StatusCompleted
			if tc.started < 6 {
				wantStatus = engine.StatusInterrupted
			}
			if sum.Status != wantStatus {
				t.Errorf("status %s, want %s", sum.Status, wantStatus)
			}
		})
	}
}

// --max-cost given to Run is stored with the run's spec: a resume without
// it keeps the cap.
func TestBudgetMaxCostIsStoredWithTheRun(t *testing.T) {
	ctx := context.Background()
	srv, base := pricedServer(t)
	a := openBudgetApp(t)
	sum, err := a.Run(ctx, budgetSpec(t, base, ""), RunOptions{MaxCostUSD: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if sum.NotStarted != 5 {
		t.Fatalf("not started %d, want 5", sum.NotStarted)
	}
	run, err := a.Store().GetRun(ctx, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	s, err := run.DecodeSpec()
	if err != nil || s.Budget == nil || s.Budget.USD != 0.2 {
		t.Fatalf("stored spec budget %+v, %v; want usd 0.2", s.Budget, err)
	}
	again, err := a.Resume(ctx, sum.RunID, RunOptions{})
	if err != nil || again.NotStarted != 5 || len(srv.Requests()) != 1 {
		t.Fatalf("resume without --max-cost: %+v, %v, %d model calls", again, err, len(srv.Requests()))
	}
}

// A negative cap is a usage error, from the CLI's flag and from the spec
// (with its position).
func TestBudgetRejectsNegativeCaps(t *testing.T) {
	_, base := pricedServer(t)
	a := openBudgetApp(t)
	_, err := a.Run(context.Background(), budgetSpec(t, base, ""), RunOptions{MaxCostUSD: -1})
	var se SpecError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "--max-cost -1: give a positive amount of USD") {
		t.Errorf("Run with --max-cost -1: %v", err)
	}
	if _, err := a.Estimate(context.Background(), budgetSpec(t, base, ""), RunOptions{MaxCostUSD: -1}); !errors.As(err, &se) {
		t.Errorf("Estimate with --max-cost -1: %v", err)
	}
	for _, tc := range []struct{ budget, want string }{
		{"{usd: -0.5}", "budget.yaml:3:15: budget.usd must be a positive amount, or absent for no cap (it is -0.5); budget.usd caps the whole run's spend in USD"},
		{"{tokens: -3}", "budget.yaml:3:18: budget.tokens must be positive, or absent for no cap (it is -3); budget.tokens caps the whole run's tokens"},
		{"{usd: 0}", "budget.yaml:3:1: budget sets no limit: its usd, tokens and wall_clock are all 0 or absent, and 0 means no limit; give budget.usd"},
	} {
		f, err := spec.Parse("budget.yaml", []byte("dataset: {records: [{id: a, input: x}]}\ntarget: {connector: scripted, model: m, script: {default: [{content: x}]}}\nbudget: "+tc.budget+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("budget %s: %v\nwant it to contain %q", tc.budget, err, tc.want)
		}
	}
}

// The estimate of a spec on disk: its dataset read from the JSONL file
// beside it, its harness's pricing and budget, --max-cost as the cap.
// Nothing runs and nothing is stored.
func TestEstimateOfASpecFile(t *testing.T) {
	dir := t.TempDir()
	var recs strings.Builder
	for i := range 4 {
		fmt.Fprintf(&recs, `{"id": "r%d", "input": "%s"}`+"\n", i, strings.Repeat("y", 80)) // 20 tokens each
	}
	if err := os.WriteFile(filepath.Join(dir, "tasks.jsonl"), []byte(recs.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	y := `name: fix-calc
trials: 2
dataset: {path: tasks.jsonl}
target: {connector: openai, model: house-model, base_url: "http://127.0.0.1:1/v1"}
harness:
  builtin:
    max_steps: 5
    budget: {usd: 0.02}
    pricing: {house-model: {input: 1, output: 2}}
environment: {image: "docker.io/library/alpine:3.20"}
`
	p := filepath.Join(dir, "fix-calc.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := spec.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	a := openBudgetApp(t)
	est, err := a.Estimate(context.Background(), f, RunOptions{MaxCostUSD: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	// 5 steps: input 5×(2000+20) + 600×(0+…+4) = 10,100 + 6,000 = 16,100,
	// output 1,500: $0.0161 + $0.003 = $0.0191, under budget.usd $0.02.
	if est.Records != 4 || est.Trials != 8 || est.PerTrialTokens != 17_600 || !near(est.PerTrialUSD, 0.0191) || !near(est.USD, 8*0.0191) || est.CapTrials != 3 {
		t.Fatalf("estimate %+v", est)
	}
	var b strings.Builder
	if err := est.Write(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Estimate for fix-calc: 4 records × 2 = 8 trials",
		"per trial  up to $0.0191, 17,600 tokens",
		"run        up to $0.1528, 140,800 tokens",
		"cap        $0.05",
		"stops the run after about 3 of 8 trials start",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("estimate lacks %q:\n%s", want, b.String())
		}
	}
	runs, err := a.Store().ListRuns(context.Background(), store.ListRunsOptions{})
	if err != nil || len(runs) != 0 {
		t.Errorf("the estimate stored runs: %v, %v", runs, err)
	}
}
