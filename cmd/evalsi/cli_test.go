package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/store"
)

// binResult is what a run of a built binary gave.
type binResult struct {
	code           int
	stdout, stderr string
}

// runBin runs bin with args (and extra environment) and waits for it.
func runBin(t *testing.T, env []string, bin string, args ...string) binResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return binResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// buildEvalsid builds the evalsid binary into a temp dir.
func buildEvalsid(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "evalsid")
	cmd := exec.Command("go", "build", "-o", bin, "evals.si/cmd/evalsid")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building evalsid: %v\n%s", err, out)
	}
	return bin
}

// commandPaths lists every runnable command under root, as the words
// typed after the binary's name.
func commandPaths(root *cobra.Command) [][]string {
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		out = append(out, path)
		for _, sub := range c.Commands() {
			if !sub.Hidden {
				walk(sub, append(slices.Clone(path), sub.Name()))
			}
		}
	}
	walk(root, nil)
	return out
}

// TestBinaryHelpAndFlags drives the real binaries: every subcommand's
// --help is its own usage and exits 0, flags work after positional
// arguments and in Go's one-dash spelling, shell completion is there, and
// unknown commands and flags are usage errors with a one-line hint.
func TestBinaryHelpAndFlags(t *testing.T) {
	evalsiBin, evalsidBin := buildEvalsi(t), buildEvalsid(t)

	root, _ := newRootCmd(io.Discard, io.Discard)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	paths := commandPaths(root)
	if len(paths) < 15 {
		t.Fatalf("only %d commands found: %v", len(paths), paths)
	}
	for _, p := range paths {
		r := runBin(t, nil, evalsiBin, append(slices.Clone(p), "--help")...)
		usage := "Usage:\n  " + strings.Join(append([]string{"evalsi"}, p...), " ")
		if r.code != 0 || !strings.Contains(r.stdout, usage) {
			t.Errorf("evalsi %v --help: exit %d, stdout lacks %q:\n%s%s", p, r.code, usage, r.stdout, r.stderr)
		}
	}
	// evalsid's, from its own binary.
	for _, p := range [][]string{{}, {"model-server"}, {"sandbox"}, {"sandbox", "probe"}, {"sandboxd"}, {"operator"}, {"serve"}, {"worker"}, {"completion"}} {
		r := runBin(t, nil, evalsidBin, append(slices.Clone(p), "--help")...)
		usage := "Usage:\n  " + strings.Join(append([]string{"evalsid"}, p...), " ")
		if r.code != 0 || !strings.Contains(r.stdout, usage) {
			t.Errorf("evalsid %v --help: exit %d, stdout lacks %q:\n%s%s", p, r.code, usage, r.stdout, r.stderr)
		}
	}
	if r := runBin(t, nil, evalsidBin, "sandbox", "--help"); !strings.Contains(r.stdout, "probe") {
		t.Errorf("evalsid sandbox --help does not list probe:\n%s", r.stdout)
	}
	// The run command's help names the product documentation's flags.
	r := runBin(t, nil, evalsiBin, "run", "--help")
	for _, f := range []string{"-f, --file", "--judge-provider", "--judge-model", "--server", "--json", "--fail-under", "--store", "--resume", "--junit", "-v, --verbose"} {
		if !strings.Contains(r.stdout, f) {
			t.Errorf("evalsi run --help lacks %s:\n%s", f, r.stdout)
		}
	}

	for _, c := range []struct {
		bin  string
		args []string
		want string
	}{
		{evalsiBin, []string{"completion", "bash"}, "bash completion"},
		{evalsiBin, []string{"completion", "zsh"}, "#compdef evalsi"},
		{evalsiBin, []string{"completion", "fish"}, "complete -c evalsi"},
		{evalsidBin, []string{"completion", "bash"}, "bash completion"},
	} {
		if r := runBin(t, nil, c.bin, c.args...); r.code != 0 || !strings.Contains(r.stdout, c.want) {
			t.Errorf("%s %v: exit %d, stdout lacks %q", filepath.Base(c.bin), c.args, r.code, c.want)
		}
	}

	// Usage errors: exit 2, one line naming what to type.
	for _, c := range []struct {
		bin  string
		args []string
		want string
	}{
		{evalsiBin, []string{"frobnicate"}, "unknown command \"frobnicate\""},
		{evalsiBin, []string{"runs", "lst"}, `did you mean "list"?`},
		{evalsiBin, []string{"runs", "list", "--nope"}, "unknown flag: --nope; see `evalsi runs list --help`"},
		{evalsiBin, []string{"runs"}, "runs needs a subcommand"},
		{evalsiBin, []string{"schema", "extra"}, "takes no arguments"},
		{evalsidBin, []string{"nope"}, "unknown command \"nope\""},
		{evalsidBin, []string{"sandbox"}, "sandbox needs a subcommand: probe"},
		{evalsidBin, []string{"worker", "--bogus"}, "unknown flag: --bogus"},
	} {
		r := runBin(t, nil, c.bin, c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s %v: exit %d, want 2 and one line with %q; stderr:\n%s", filepath.Base(c.bin), c.args, r.code, c.want, r.stderr)
		}
	}

	// Flags after positional arguments, and in Go flag's spelling.
	db := filepath.Join(t.TempDir(), "evalsi.db")
	r = runBin(t, nil, evalsiBin, "run", "../../examples/capitals-offline.yaml", "--store", db, "--json")
	var sum struct {
		RunID string `json:"run_id"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &sum) != nil || sum.RunID == "" {
		t.Fatalf("run SPEC --store --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id := sum.RunID
	var show struct {
		RunID  string `json:"run_id"`
		Trials []struct {
			RecordID string `json:"record_id"`
		} `json:"trial_results"`
	}
	if r = runBin(t, nil, evalsiBin, "runs", "show", id, "--json", "--store", db); r.code != 0 || json.Unmarshal([]byte(r.stdout), &show) != nil || show.RunID != id || len(show.Trials) != 4 {
		t.Errorf("runs show RUN --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = runBin(t, nil, evalsiBin, "runs", "export", id, "--format", "jsonl", "--store", db); r.code != 0 || strings.Count(r.stdout, "\n") != 4 {
		t.Errorf("runs export RUN --format jsonl: exit %d\n%s", r.code, r.stderr)
	}
	if r = runBin(t, nil, evalsiBin, "runs", "compare", id, id, "--json", "--store", db); r.code != 0 || !strings.Contains(r.stdout, `"unchanged":4`) {
		t.Errorf("runs compare A B --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = runBin(t, nil, evalsiBin, "runs", "list", "-json", "-store="+db); r.code != 0 || !strings.Contains(r.stdout, `"run_id":"`+id+`"`) {
		t.Errorf("runs list -json -store=DB: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A telemetry setting that cannot work is the user's to fix: exit 2,
	// naming it. Nothing listens on the endpoint; the error comes first.
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9", "OTEL_EXPORTER_OTLP_PROTOCOL=carrier-pigeon"}
	if r = runBin(t, otel, evalsiBin, "run", "-f", "../../examples/capitals-offline.yaml", "--store", db); r.code != exitUsage || !strings.Contains(r.stderr, "carrier-pigeon") {
		t.Errorf("a bad OTEL_EXPORTER_OTLP_PROTOCOL: exit %d, want 2\n%s", r.code, r.stderr)
	}
}

// TestMissingStoreRefused: the commands that only read a store refuse a
// --store naming no file, and do not create it; run creates it.
func TestMissingStoreRefused(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.db")
	cand := filepath.Join(dir, "cand.yaml")
	if err := os.WriteFile(cand, []byte("name: c\ndataset: {run: {run_id: r-x}}\ntarget: {connector: scripted, model: m, script: {default: [{content: hi}]}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"runs", "list", "--store", missing},
		{"runs", "list", "--json", "--store", missing},
		{"runs", "show", "r-x", "--store", missing},
		{"runs", "export", "r-x", "--store", missing},
		{"runs", "compare", "r-x", "r-y", "--store", missing},
		{"runs", "resume", "r-x", "--store", missing},
		{"run", "--resume", "r-x", "--store", missing},
		{"view", "--store", missing},
		{"promote", "r-x", "--dataset", "d", "--when", "true", "--store", missing},
		{"shadow", "-f", cand, "--baseline", "r-x", "--store", missing},
	} {
		r := cli(context.Background(), args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "no store at "+missing+"; run `evalsi run` first or pass --store") {
			t.Errorf("%v: exit %d, want 2 naming the missing store\n%s", args, r.code, r.stderr)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a reading command created %s: %v", missing, err)
	}
	if r := cli(context.Background(), "run", "-f", "../../examples/capitals-offline.yaml", "--store", missing, "--json"); r.code != 0 {
		t.Fatalf("run with a new store: exit %d\n%s", r.code, r.stderr)
	}
	if r := cli(context.Background(), "runs", "list", "--store", missing); r.code != 0 || !strings.Contains(r.stdout, "capitals-offline") {
		t.Errorf("runs list of the store run made: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestRunsJSONMatchesRunJSON: runs list --json and runs show --json carry
// run --json's keys with its values; an empty store lists [].
func TestRunsJSONMatchesRunJSON(t *testing.T) {
	db := filepath.Join(t.TempDir(), "evalsi.db")
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if r := cli(context.Background(), "runs", "list", "--json", "--store", db); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("runs list --json of an empty store: exit %d, %q, want []", r.code, r.stdout)
	}

	r := cli(context.Background(), "run", "-f", "../../examples/trials-offline.yaml", "--store", db, "--json")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	var runJSON map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &runJSON); err != nil {
		t.Fatal(err)
	}
	id := runJSON["run_id"].(string)

	l := cli(context.Background(), "runs", "list", "--json", "--store", db)
	var list []map[string]any
	if l.code != 0 || json.Unmarshal([]byte(l.stdout), &list) != nil || len(list) != 1 {
		t.Fatalf("runs list --json: exit %d\n%s%s", l.code, l.stdout, l.stderr)
	}
	s := cli(context.Background(), "runs", "show", id, "--json", "--store", db)
	var show map[string]any
	if s.code != 0 || json.Unmarshal([]byte(s.stdout), &show) != nil {
		t.Fatalf("runs show --json: exit %d\n%s%s", s.code, s.stdout, s.stderr)
	}
	for name, got := range map[string]map[string]any{"runs list": list[0], "runs show": show} {
		for k, want := range runJSON {
			if k == "elapsed_seconds" {
				continue
			}
			b1, _ := json.Marshal(want)
			b2, _ := json.Marshal(got[k])
			if !bytes.Equal(b1, b2) {
				t.Errorf("%s --json: %s = %s, run --json has %s", name, k, b2, b1)
			}
		}
		// trials-offline: 3 records × 3 trials, all done.
		if got["trials_total"] != float64(9) || got["trials_done"] != float64(9) || got["status_label"] != "completed" || got["target"] != "scripted/scripted-arith" {
			t.Errorf("%s --json: trials_total %v trials_done %v status_label %v target %v", name, got["trials_total"], got["trials_done"], got["status_label"], got["target"])
		}
		for k := range got {
			if strings.ToLower(k) != k || strings.Contains(k, " ") {
				t.Errorf("%s --json: key %q is not snake_case", name, k)
			}
		}
	}
	trials, _ := show["trial_results"].([]any)
	if len(trials) != 9 {
		t.Fatalf("runs show --json has %d trial_results, want 9", len(trials))
	}
	first := trials[0].(map[string]any)
	for _, k := range []string{"trial_id", "record_id", "trial", "attempt", "status", "passed", "scores", "usage", "tokens", "cost_usd", "duration_seconds", "trajectory"} {
		if _, ok := first[k]; !ok {
			t.Errorf("a trial of runs show --json lacks %q: %v", k, first)
		}
	}

	// The table: target, trials done of records × trials, a score summary.
	l = cli(context.Background(), "runs", "list", "--store", db)
	for _, want := range []string{"TARGET", "scripted/scripted-arith", "completed", "9/9", "exact-match=0.667 (6/9)"} {
		if !strings.Contains(l.stdout, want) {
			t.Errorf("runs list lacks %q:\n%s", want, l.stdout)
		}
	}
}

// TestRunsShowTrialDetail: runs show reads a run whose trial errored as
// "completed with errors", with the error whole, and shows each checked
// trial's checker verdict and output and its trajectory summary.
func TestRunsShowTrialDetail(t *testing.T) {
	requireBwrap(t)
	db := filepath.Join(t.TempDir(), "evalsi.db")
	p := agentSpec(t, "      - content: done", "    command: [no-such-interpreter, check.py]", "")
	r := evalsi(t, db, "run", "-f", p, "--json")
	if r.code != exitErrored {
		t.Fatalf("exit %d, want 3\n%s", r.code, r.stderr)
	}
	errored := r.json.RunID
	var show struct {
		StatusLabel  string `json:"status_label"`
		TrialResults []struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		} `json:"trial_results"`
	}
	s := evalsi(t, db, "runs", "show", errored, "--json")
	if err := json.Unmarshal([]byte(s.stdout), &show); err != nil || len(show.TrialResults) != 1 || show.TrialResults[0].Error == "" {
		t.Fatalf("runs show --json: %v\n%s", err, s.stdout)
	}
	if show.StatusLabel != "completed with errors" {
		t.Errorf("status_label %q, want completed with errors", show.StatusLabel)
	}
	s = evalsi(t, db, "runs", "show", errored)
	for _, want := range []string{"status=completed with errors", "1/1 done, 1 errored", "r1 trial 0 (attempt", "  error ("} {
		if !strings.Contains(s.stdout, want) {
			t.Errorf("runs show lacks %q:\n%s", want, s.stdout)
		}
	}
	// The error whole, each of its lines, not its first line cut short.
	for _, line := range strings.Split(show.TrialResults[0].Error, "\n") {
		if !strings.Contains(s.stdout, "    "+line) {
			t.Errorf("runs show lacks the error's line %q:\n%s", line, s.stdout)
		}
	}
	if l := evalsi(t, db, "runs", "list"); !strings.Contains(l.stdout, "completed with errors") || !strings.Contains(l.stdout, "1/1") {
		t.Errorf("runs list of an errored run:\n%s", l.stdout)
	}

	r = evalsi(t, db, "run", "-f", "../../examples/agents/fix-calc-wrong-offline.yaml", "--json")
	if r.code != 0 {
		t.Fatalf("fix-calc-wrong-offline: exit %d\n%s", r.code, r.stderr)
	}
	s = evalsi(t, db, "runs", "show", r.json.RunID)
	t.Logf("runs show:\n%s", s.stdout)
	for _, want := range []string{"STEPS", "TOOL CALLS", "TIME", "checker: fail (exit 1", "failed"} {
		if !strings.Contains(s.stdout, want) {
			t.Errorf("runs show of a failed check lacks %q:\n%s", want, s.stdout)
		}
	}
	var detail struct {
		TrialResults []struct {
			Trajectory struct {
				Steps     int `json:"steps"`
				ToolCalls int `json:"tool_calls"`
				Checker   struct {
					Output string `json:"output"`
					Pass   bool   `json:"pass"`
				} `json:"checker"`
			} `json:"trajectory"`
		} `json:"trial_results"`
	}
	s = evalsi(t, db, "runs", "show", r.json.RunID, "--json")
	if err := json.Unmarshal([]byte(s.stdout), &detail); err != nil || len(detail.TrialResults) != 1 {
		t.Fatalf("runs show --json: %v\n%s", err, s.stdout)
	}
	tr := detail.TrialResults[0].Trajectory
	if tr.Steps == 0 || tr.ToolCalls == 0 || tr.Checker.Pass || !strings.Contains(tr.Checker.Output, "2 failed, 1 passed") {
		t.Errorf("trajectory summary %+v: want steps, a failed check with its output", tr)
	}
}

// TestMaxCost: --max-cost stops a run from starting trials once its spend
// reaches the cap (exit 130, resumable), runs list and show say so, and
// runs resume --max-cost with a higher cap finishes it. Each trial costs
// $0.20: 50,000 input and 12,500 output tokens of gpt-4.1 ($2 / $8 per
// million), answered by the scripted model server on loopback.
func TestMaxCost(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := modelserver.New(&spec.Script{Default: []spec.ScriptReply{{Content: "4", InputTokens: 50_000, OutputTokens: 12_500}}}, nil)
	addr, err := srv.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("EVALSI_CLI_BUDGET_KEY", "not-secret")
	dir := t.TempDir()
	p := filepath.Join(dir, "priced.yaml")
	y := "name: priced\ntrials: 2\nconcurrency: 1\ndataset:\n  records:\n    - {id: a, input: \"2+2?\", expected: \"4\"}\n    - {id: b, input: \"1+3?\", expected: \"4\"}\n" +
		"target: {connector: openai, model: gpt-4.1, base_url: \"http://" + addr.String() + "/v1\", api_key_env: EVALSI_CLI_BUDGET_KEY}\nevaluators: [exact-match]\n"
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "evalsi.db")
	if r := cli(ctx, "run", "-f", p, "--store", db, "--max-cost", "-1"); r.code != exitUsage || !strings.Contains(r.stderr, "--max-cost -1") {
		t.Errorf("--max-cost -1: exit %d, want 2\n%s", r.code, r.stderr)
	}
	// A server would run without the cap: refused, before anything is dialled.
	if r := cli(ctx, "run", "-f", p, "--max-cost", "1", "--server", "http://127.0.0.1:1"); r.code != exitUsage || !strings.Contains(r.stderr, "enforced by embedded runs only") {
		t.Errorf("--max-cost with --server: exit %d, want 2\n%s", r.code, r.stderr)
	}
	// The estimate runs nothing and stores nothing: gpt-4.1's list price,
	// 2 records × 2 trials, the cap line.
	est := filepath.Join(dir, "estimate.db")
	if r := cli(ctx, "run", "-f", p, "--estimate", "--max-cost", "0.01", "--store", est); r.code != 0 ||
		!strings.Contains(r.stdout, "Estimate for priced: 2 records × 2 = 4 trials") || !strings.Contains(r.stdout, "cap        $0.01") || !strings.Contains(r.stdout, "Assumed:") {
		t.Errorf("run --estimate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if l := cli(ctx, "runs", "list", "--store", est, "--json"); strings.TrimSpace(l.stdout) != "[]" {
		t.Errorf("runs after --estimate: %s%s", l.stdout, l.stderr)
	}
	if r := cli(ctx, "run", "-f", p, "--estimate", "--json", "--store", est); r.code != 0 || !strings.Contains(r.stdout, `"trials":4`) {
		t.Errorf("run --estimate --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := cli(ctx, "run", p, "--store", db, "--json", "--max-cost", "0.5")
	var sum struct {
		RunID string `json:"run_id"`
	}
	if r.code != 130 || json.Unmarshal([]byte(r.stdout), &sum) != nil || !strings.Contains(r.stderr, "resume with a higher cap: evalsi runs resume "+sum.RunID+" --max-cost USD") {
		t.Fatalf("run --max-cost 0.5: exit %d, want 130\n%s%s", r.code, r.stdout, r.stderr)
	}
	var show map[string]any
	s := cli(ctx, "runs", "show", sum.RunID, "--store", db, "--json")
	if json.Unmarshal([]byte(s.stdout), &show) != nil || show["stopped"] != "budget $0.50 reached" || show["not_started"] != float64(1) || show["trials_done"] != float64(3) || show["trials_total"] != float64(4) {
		t.Errorf("runs show --json of the stopped run: stopped %v, not_started %v, trials %v/%v\n%s", show["stopped"], show["not_started"], show["trials_done"], show["trials_total"], s.stdout)
	}
	if l := cli(ctx, "runs", "list", "--store", db); !strings.Contains(l.stdout, "stopped: budget $0.50 reached, 1 trial not started") || !strings.Contains(l.stdout, "3/4") {
		t.Errorf("runs list of the stopped run:\n%s", l.stdout)
	}
	r = cli(ctx, "runs", "resume", sum.RunID, "--max-cost", "5", "--store", db, "--json")
	var done struct {
		Status string             `json:"status"`
		Scores map[string]float64 `json:"scores"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &done) != nil || done.Status != "completed" || done.Scores["exact-match"] != 1 {
		t.Errorf("runs resume --max-cost 5: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if l := cli(ctx, "runs", "list", "--store", db); !strings.Contains(l.stdout, "completed") || !strings.Contains(l.stdout, "4/4") {
		t.Errorf("runs list of the resumed run:\n%s", l.stdout)
	}
}
