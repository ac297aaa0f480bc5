package web

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"evals.si/engine"
	"evals.si/evaluate"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// needle is a word that occurs only deep inside a long, folded tool output.
const needle = "NEEDLE-42"

// scenario is a store of runs as a reviewer meets them: an agent run of
// 2 records × 3 trials with one errored trial (its first trial holds a
// full transcript), an older run of the same spec, a newer unrelated run,
// and a run whose every trial errored.
type scenario struct {
	st                          *store.Store
	agent, older, other, broken store.Run
	// transcript is the trial with the full transcript; sibling is another
	// trial of its record, the pair for side by side.
	transcript, sibling store.Trial
}

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// at is t0 plus ms milliseconds.
func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// transcriptEvents is one agent trajectory: a priced model call, an
// assistant turn with no text that asks for bash, the call and its long
// result, a refused host, a second step with text and a failing tool, an
// error, the stop and the checker.
func transcriptEvents() []trajectory.Event {
	var long strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&long, "test_calc.py::test_case_%02d PASSED\n", i)
		if i == 33 {
			fmt.Fprintf(&long, "marker %s found here\n", needle)
		}
	}
	exit0, exit1 := 0, 1
	args := json.RawMessage(`{"command":"python3 -m pytest -q"}`)
	return []trajectory.Event{
		{Time: at(0), Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "sandbox ready"}},
		{Time: at(1200), Step: 1, Kind: trajectory.KindModelCall, DurationMS: 1200,
			ModelCall: &trajectory.ModelCall{Model: "gpt-4o", Usage: trajectory.Usage{InputTokens: 1000, OutputTokens: 100}}},
		{Time: at(1200), Step: 1, Kind: trajectory.KindMessage, Message: &trajectory.Message{Role: trajectory.RoleAssistant,
			ToolCalls: []trajectory.ToolCall{{ID: "call_1", Name: "bash", Arguments: args}}}},
		{Time: at(1210), Step: 1, Kind: trajectory.KindToolCall, ToolCall: &trajectory.ToolCall{ID: "call_1", Name: "bash", Arguments: args}},
		{Time: at(3710), Step: 1, Kind: trajectory.KindToolResult, DurationMS: 2500,
			ToolResult: &trajectory.ToolResult{CallID: "call_1", Name: "bash", Output: long.String(), ExitCode: &exit0}},
		{Time: at(3800), Step: 1, Kind: trajectory.KindPolicy, Policy: &trajectory.Policy{Kind: "network", Host: "pypi.org:443", Detail: "refused by the egress policy"}},
		{Time: at(4800), Step: 2, Kind: trajectory.KindModelCall,
			ModelCall: &trajectory.ModelCall{Model: "gpt-4o", Usage: trajectory.Usage{InputTokens: 2000, OutputTokens: 50}, CostUSD: 0.0123}},
		{Time: at(4800), Step: 2, Kind: trajectory.KindMessage, Message: &trajectory.Message{Role: trajectory.RoleAssistant, Content: "The tests pass; checking the file once more.",
			ToolCalls: []trajectory.ToolCall{{ID: "call_2", Name: "read_file", Arguments: json.RawMessage(`{"path":"calc.py"}`)}}}},
		{Time: at(4800), Step: 2, Kind: trajectory.KindToolCall, ToolCall: &trajectory.ToolCall{ID: "call_2", Name: "read_file", Arguments: json.RawMessage(`{"path":"calc.py"}`)}},
		{Time: at(4800), Step: 2, Kind: trajectory.KindToolResult, ToolResult: &trajectory.ToolResult{CallID: "call_2", Name: "read_file", Output: "no such file: calc.py", IsError: true, ExitCode: &exit1}},
		{Time: at(4900), Step: 2, Kind: trajectory.KindError, Error: &trajectory.Error{Kind: "tool", Message: "read_file failed"}},
		{Time: at(5000), Kind: trajectory.KindStop, Stop: &trajectory.Stop{Reason: "answered"}},
		{Time: at(6000), Kind: trajectory.KindChecker, DurationMS: 900, Checker: &trajectory.Checker{ExitCode: 0, Pass: true, Score: 1, Output: "3 passed"}},
	}
}

// seedRun stores a run of name with trials per record over records: each
// trial scores task-success pass(record, trial), or errors when pass
// returns nil; a summary is written as the engine writes it.
func seedRun(tb testing.TB, st *store.Store, sp *spec.Spec, records []string, pass func(rec string, trial int) *bool) (store.Run, []store.Trial) {
	tb.Helper()
	ctx := context.Background()
	run, err := st.CreateRun(ctx, store.RunInput{Spec: sp})
	if err != nil {
		tb.Fatal(err)
	}
	var trials []store.Trial
	var outcomes []*engine.Outcome
	for _, rec := range records {
		for i := 1; i <= max(sp.Trials, 1); i++ {
			tr, err := st.StartTrial(ctx, store.TrialInput{RunID: run.ID, RecordID: rec, Trial: i})
			if err != nil {
				tb.Fatal(err)
			}
			o := &engine.Outcome{RunID: run.ID, RecordID: rec, Trial: i, Status: engine.TrialCompleted}
			p := pass(rec, i)
			res := store.TrialResult{Status: store.TrialFinished, Passed: p, Usage: trajectory.Usage{InputTokens: 3000, OutputTokens: 150}, CostUSD: 0.02}
			if p == nil {
				o.Status, o.ErrorKind, o.Error = engine.TrialErrored, "image", "pulling python:3.13: connection refused"
				res = store.TrialResult{Status: store.TrialErrored, ErrorKind: o.ErrorKind, Error: o.Error}
			} else {
				v := 0.0
				if *p {
					v = 1
				}
				o.Evaluations = []evaluate.EvaluatorResult{{Evaluator: evaluate.TaskSuccess, Scores: []evaluate.Score{{Name: "task-success", Value: v}}}}
				if err := st.PutScores(ctx, tr.ID, []store.Score{{Name: "task-success", Value: v}}); err != nil {
					tb.Fatal(err)
				}
			}
			if err := st.FinishTrial(ctx, tr.ID, res); err != nil {
				tb.Fatal(err)
			}
			tr, _ = st.GetTrial(ctx, tr.ID)
			trials = append(trials, tr)
			outcomes = append(outcomes, o)
		}
	}
	sum := engine.Summarize(run.ID, sp.Name, store.RunCompleted, len(records), max(sp.Trials, 1), outcomes, sp.Evaluators)
	b, err := json.Marshal(sum)
	if err != nil {
		tb.Fatal(err)
	}
	if err := st.FinishRun(ctx, run.ID, store.RunCompleted, b, ""); err != nil {
		tb.Fatal(err)
	}
	run, _ = st.GetRun(ctx, run.ID)
	return run, trials
}

func ptr[T any](v T) *T { return &v }

func newScenario(tb testing.TB) *scenario {
	tb.Helper()
	st := openStore(tb)
	ctx := context.Background()
	evals := []spec.Evaluator{{Name: evaluate.TaskSuccess}}
	agentSpec := func(name string) *spec.Spec {
		return &spec.Spec{Name: name, Trials: 3, Evaluators: evals,
			Target: spec.Target{ModelRef: spec.ModelRef{Connector: "openai", Model: "gpt-4o"}}, Harness: &spec.Harness{Builtin: &spec.Builtin{MaxSteps: 10}}}
	}
	sc := &scenario{st: st}
	// Oldest first: the older fix-calc run, then the broken one, the
	// agent run, and last the unrelated one (the newest run).
	sc.older, _ = seedRun(tb, st, agentSpec("fix-calc"), []string{"add", "sub"}, func(string, int) *bool { return ptr(false) })
	sc.broken, _ = seedRun(tb, st, &spec.Spec{Name: "broken-image", Trials: 1, Evaluators: evals,
		Target: spec.Target{Agent: &spec.Agent{CLI: &spec.CLIAgent{Command: "claude -p {instruction}"}}}}, []string{"add", "sub"}, func(string, int) *bool { return nil })
	var trials []store.Trial
	sc.agent, trials = seedRun(tb, st, agentSpec("fix-calc"), []string{"add", "sub"}, func(rec string, i int) *bool {
		switch {
		case rec == "sub" && i == 3:
			return nil
		case rec == "add":
			return ptr(i != 2)
		default:
			return ptr(i == 1)
		}
	})
	sc.other, _ = seedRun(tb, st, &spec.Spec{Name: "unrelated", Evaluators: evals, Target: spec.Target{ModelRef: spec.ModelRef{Connector: "scripted"}}}, []string{"q"}, func(string, int) *bool { return ptr(true) })
	sc.transcript, sc.sibling = trials[0], trials[1]
	for _, e := range transcriptEvents() {
		if err := st.AppendEvent(ctx, sc.transcript.ID, e); err != nil {
			tb.Fatal(err)
		}
	}
	// The sibling took one step and changed the file differently.
	for _, e := range transcriptEvents()[:5] {
		if err := st.AppendEvent(ctx, sc.sibling.ID, e); err != nil {
			tb.Fatal(err)
		}
	}
	for id, d := range map[string]string{
		sc.transcript.ID: "--- a/calc.py\n+++ b/calc.py\n-    return a - b\n+    return a + b\n",
		sc.sibling.ID:    "--- a/calc.py\n+++ b/calc.py\n-    return a - b\n+    return b + a  # sibling\n",
	} {
		if _, err := st.PutArtifact(ctx, id, "diff.patch", "text/x-diff", strings.NewReader(d)); err != nil {
			tb.Fatal(err)
		}
	}
	return sc
}

// The API reads runs as a person should: counts over records × trials,
// "completed with errors" with its health, the target, and scores with
// their uncertainty; model calls without a recorded cost are priced.
func TestAPIRunHealthCountsAndEstimates(t *testing.T) {
	sc := newScenario(t)
	h := New(sc.st, nil)

	var runs struct{ Runs []runView }
	getJSON(t, h, "/api/runs", 200, &runs)
	byID := map[string]runView{}
	for _, r := range runs.Runs {
		byID[r.ID] = r
	}
	for _, tc := range []struct {
		name                  string
		run                   store.Run
		label, health, target string
		done, trials, errored int
		estimates             []string
	}{
		{"agent", sc.agent, "completed with errors", "errors", "openai · gpt-4o", 6, 6, 1, []string{"task-success", "pass@3"}},
		{"broken", sc.broken, "completed with errors", "no_scores", "cli agent · claude", 2, 2, 2, nil},
		{"older", sc.older, "completed", "ok", "openai · gpt-4o", 6, 6, 0, []string{"task-success", "pass@3"}},
		{"other", sc.other, "completed", "ok", "scripted", 1, 1, 0, []string{"task-success"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := byID[tc.run.ID]
			if v.Label != tc.label || v.Health != tc.health || v.Target != tc.target || v.Done != tc.done || v.Trials != tc.trials || v.Errored != tc.errored {
				t.Errorf("run %s: label %q health %q target %q done %d/%d errored %d; want %q %q %q %d/%d %d",
					tc.name, v.Label, v.Health, v.Target, v.Done, v.Trials, v.Errored, tc.label, tc.health, tc.target, tc.done, tc.trials, tc.errored)
			}
			var names []string
			for _, e := range v.Estimates {
				names = append(names, e.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.estimates, ",") {
				t.Errorf("estimates %v, want %v", names, tc.estimates)
			}
		})
	}

	// task-success of the agent run: 1,0,1 (add) and 1,0 (sub) over the 5
	// scored trials: mean 0.6; its stderr is over the two records (trials
	// of one record are not independent): their means 2/3 and 1/2 have sd
	// 0.11785, so stderr 0.11785/√2 = 0.08333.
	var rd runDetailView
	getJSON(t, h, "/api/runs/"+sc.agent.ID, 200, &rd)
	m := rd.Evaluators[0].Scores[0]
	if m.Name != "task-success" || !m.Known || m.N != 5 || fmt.Sprintf("%.5f %.5f", m.Mean, m.Stderr) != "0.60000 0.08333" {
		t.Errorf("task-success estimate = %+v", m)
	}
	if len(rd.PassAtK) == 0 || !rd.PassAtK[0].Known || rd.PassAtK[0].Records != 2 {
		t.Errorf("pass@k = %+v", rd.PassAtK)
	}
	if rd.Run.Done != 6 || rd.Run.Trials != 6 || rd.Run.TrialsPerRecord != 3 {
		t.Errorf("run detail counts %d/%d × %d", rd.Run.Done, rd.Run.Trials, rd.Run.TrialsPerRecord)
	}

	// Step 1's model call has no cost: priced from gpt-4o's list price
	// ($2.50 in, $10 out per million: 1000 and 100 tokens cost $0.0035);
	// step 2's is recorded.
	var p struct {
		Events []struct {
			Kind       string                `json:"kind"`
			ModelCall  *trajectory.ModelCall `json:"model_call"`
			CostSource string                `json:"cost_source"`
		}
	}
	getJSON(t, h, "/api/trials/"+sc.transcript.ID+"/events", 200, &p)
	var got []string
	for _, e := range p.Events {
		if e.ModelCall != nil {
			got = append(got, fmt.Sprintf("%s %.4f", e.CostSource, e.ModelCall.CostUSD))
		}
	}
	if strings.Join(got, ", ") != "pricing 0.0035, recorded 0.0123" {
		t.Errorf("model call costs: %v", got)
	}
	var td trialDetailView
	getJSON(t, h, "/api/trials/"+sc.transcript.ID, 200, &td)
	if len(td.Siblings) != 2 || td.Siblings[0].ID != sc.sibling.ID {
		t.Errorf("siblings = %+v", td.Siblings)
	}
}

// browser drives one headless Chromium tab for a test.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

func openBrowser(t *testing.T) *browser {
	t.Helper()
	requireChromium(t)
	return &browser{t: t, ctx: newBrowser(t), shots: screenshotDir(t)}
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		// What the page shows says why far better than a timeout.
		page, _ := chromedp.Run(context.WithoutCancel(b.ctx), chromedp.Evaluate[string](`document.body.innerText.slice(0, 3000)`))
		b.t.Fatalf("%s: %v\npage:\n%s", what, err, page)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("reading %s: %v", sel, err)
	}
	return s
}

func (b *browser) eval(js string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", js, err)
	}
	return s
}

func (b *browser) shoot(name string) {
	b.t.Helper()
	// From the top, so sticky bars sit where a reader sees them.
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`)); err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(b.shots, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", p)
}

func (b *browser) want(what, got string, wants ...string) {
	b.t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			b.t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// TestBrowserTranscript clicks through the scenario's runs in headless
// Chromium: the list and run pages read errored runs as "completed with
// errors" (red when nothing scored, amber when some did) with n/6 trials
// and scores ± their interval; the trial page pairs each tool call with its
// result, folds the long output behind "show all", searches and filters,
// and shows per-step time and cost; two trials of a record show side by
// side.
func TestBrowserTranscript(t *testing.T) {
	sc := newScenario(t)
	b := openBrowser(t)
	base := serve(t, sc.st)
	const red, amber = "rgb(201, 42, 42)", "rgb(179, 92, 0)"
	color := func(sel string) string {
		return b.eval(`getComputedStyle(document.querySelector(` + strconvQuote(sel) + `)).color`)
	}

	// Runs list.
	row := func(r store.Run) string { return `#runs tr[data-run="` + r.ID + `"]` }
	b.do("opening the runs page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(row(sc.broken))))
	b.want("broken run row", b.text(row(sc.broken)), "completed with errors", "cli agent · claude", "2/2")
	b.want("agent run row", b.text(row(sc.agent)), "completed with errors", "openai · gpt-4o", "6/6", "task-success 0.600 ±0.163", "pass@3")
	if c := color(row(sc.broken) + " .status"); c != red {
		t.Errorf("all-errored run's status color %s, want red %s", c, red)
	}
	if c := color(row(sc.agent) + " .status"); c != amber {
		t.Errorf("partly errored run's status color %s, want amber %s", c, amber)
	}
	b.shoot("t1-runs.png")

	// The agent run: counts, estimates, and "compare with" proposing the
	// older run of the same spec before the newer unrelated one.
	b.do("opening the agent run", chromedp.Click(chromedp.CSS(row(sc.agent)+" a.run-name")), chromedp.WaitVisible(chromedp.CSS("#scores")))
	b.want("run title", b.text("h1"), "completed with errors")
	b.want("trials done", b.text("#stat-done"), "6/6", "2 records × 3")
	b.want("health note", b.text("#health"), "1 of 6 trials errored")
	b.want("task-success row", b.text(`#scores tr[data-score="task-success"]`), "0.600", "±0.163", "[0.437, 0.763]", "0.083", "5")
	b.want("pass@1 row", b.text(`#scores tr[data-score="pass@1"]`), "2 rec.", "±")
	b.want("pass@3 row", b.text(`#scores tr[data-score="pass@3"]`), "1 rec.")
	if first := b.eval(`document.querySelector('#compare-with').options[0].value`); first != sc.older.ID {
		t.Errorf("compare with proposes %s first, want the older run of the same spec %s", first, sc.older.ID)
	}
	b.shoot("t2-run.png")

	// The trial's transcript.
	b.do("opening the trial", chromedp.Click(chromedp.CSS(`#trials tr[data-trial="`+sc.transcript.ID+`"] a.trial-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline .ev[data-seqs~="5"]`)))
	call1 := `#timeline .ev.k-tool_call[data-seqs~="5"]`
	b.want("bash block", b.text(call1), "bash", "$ python3 -m pytest -q", "exit 0", "2.5 s", "test_case_01 PASSED", "show all (42 lines")
	if seqs := b.eval(`document.querySelector('` + call1 + `').dataset.seqs`); seqs != "3 4 5" {
		t.Errorf("bash block holds events %q, want the assistant turn, the call and its result (3 4 5)", seqs)
	}
	if n := b.eval(`String(document.querySelectorAll('#timeline .ev.k-message').length)`); n != "1" {
		t.Errorf("%s message rows, want 1 (the turn with no text shows as its tool call only)", n)
	}
	if strings.Contains(b.text("#timeline"), "asks for") {
		t.Errorf("the transcript has an empty 'asks for' row")
	}
	b.want("read_file block", b.text(`#timeline .ev.k-tool_call[data-seqs~="10"]`), "read_file", "error", "no such file", "—")
	b.want("step 1", b.text(`.step-head[data-step="1"]`), "3.8 s", "1,100 tokens", "$0.0035")
	b.want("step 2", b.text(`.step-head[data-step="2"]`), "100 ms", "2,050 tokens", "$0.0123")
	b.want("priced model call", b.text(`#timeline .ev.k-model_call[data-seq="2"]`), "gpt-4o", "$0.0035 (priced)", "1.2 s")

	// Fold: the needle is past the fold until "show all".
	if strings.Contains(b.text(call1), needle) {
		t.Errorf("folded output shows line 34")
	}
	b.do("unfolding", chromedp.Click(chromedp.CSS(call1+" button.show-all")))
	b.want("unfolded output", b.text(call1), needle, "test_case_40 PASSED", "show less")
	b.do("folding again", chromedp.Click(chromedp.CSS(call1+" button.show-all")))
	if strings.Contains(b.text(call1), needle) {
		t.Errorf("folding again still shows line 34")
	}
	b.shoot("t3-trial.png")

	// Search unfolds and highlights; Enter and the buttons walk matches.
	b.do("searching", chromedp.SendKeys(chromedp.CSS("#trial-search"), strings.ToLower(needle)+kb.Enter), chromedp.WaitVisible(chromedp.CSS("mark.hit.cur")))
	if got := b.text("#search-count"); got != "1 of 1" {
		t.Errorf("search count %q, want 1 of 1", got)
	}
	if got := b.text("mark.hit.cur"); got != needle {
		t.Errorf("current match %q", got)
	}
	b.shoot("t4-search.png")
	b.do("searching for PASSED", chromedp.Evaluate[chromedp.Void](`document.querySelector('#trial-search').value = ''`),
		chromedp.SendKeys(chromedp.CSS("#trial-search"), "passed"+kb.Enter), chromedp.Sleep(300), chromedp.Click(chromedp.CSS("#search-next")))
	if got := b.text("#search-count"); got != "2 of 41" {
		t.Errorf("search count after next %q, want 2 of 41 (40 test lines and the checker's output)", got)
	}
	b.do("prev", chromedp.Click(chromedp.CSS("#search-prev")), chromedp.Click(chromedp.CSS("#search-prev")))
	if got := b.text("#search-count"); got != "41 of 41" {
		t.Errorf("search count after prev twice %q, want 41 of 41 (it wraps)", got)
	}

	// Filters: errors only leaves the error event and the failing tool.
	for _, cat := range []string{"message", "tool", "model", "policy", "other"} {
		b.do("filter "+cat, chromedp.Click(chromedp.CSS(`#timeline-filters input[data-cat="`+cat+`"]`)))
	}
	visible := b.eval(`[...document.querySelectorAll('#timeline .ev')].filter(e => !e.hidden).map(e => e.dataset.seqs).join(' | ')`)
	if visible != "8 9 10 | 11" {
		t.Errorf("with only errors shown, blocks %q, want the failing read_file (8 9 10) and the error (11)", visible)
	}
	b.shoot("t5-filter-errors.png")
	b.do("policy only", chromedp.Click(chromedp.CSS(`#timeline-filters input[data-cat="error"]`)), chromedp.Click(chromedp.CSS(`#timeline-filters input[data-cat="policy"]`)))
	visible = b.eval(`[...document.querySelectorAll('#timeline .ev')].filter(e => !e.hidden).map(e => e.innerText).join(' | ')`)
	b.want("policy filter", visible, "pypi.org:443", "denied: network")

	// Side by side with another trial of the record.
	b.do("side by side", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`), chromedp.Click(chromedp.CSS(`#siblings a[href*="`+sc.sibling.ID+`"]`)), chromedp.WaitVisible(chromedp.CSS("#sbs")))
	b.want("left", b.text("#side-a"), "add · trial 1", "pass")
	b.want("right", b.text("#side-b"), "add · trial 2", "fail")
	b.want("step 1 row", b.text(`.sbs-row[data-step="s1"]`), "step 1", "bash", "bash")
	if n := b.eval(`String(document.querySelectorAll('.sbs-row[data-step="s1"] .sbs-cell .ev.k-tool_call').length)`); n != "2" {
		t.Errorf("step 1 row has %s tool blocks, want one per side", n)
	}
	b.want("step 2 row", b.text(`.sbs-row[data-step="s2"]`), "read_file", "no step 2")
	b.want("left diff", b.text("#diff-a"), "+    return a + b")
	b.want("right diff", b.text("#diff-b"), "+    return b + a  # sibling")
	b.shoot("t6-side-by-side.png")

	// The all-errored run's page is red.
	b.do("opening the broken run", chromedp.Navigate(base+"/runs/"+sc.broken.ID), chromedp.WaitVisible(chromedp.CSS("#health")))
	b.want("broken title", b.text("h1"), "completed with errors")
	b.want("broken health", b.text("#health"), "Every trial errored")
	b.want("broken counts", b.text("#stat-done"), "2/2")
	if c := color("h1 .status"); c != red {
		t.Errorf("all-errored run page status color %s, want red", c)
	}
	b.shoot("t7-broken-run.png")

	// Compare runs links the record's trials side by side.
	b.do("compare runs", chromedp.Navigate(base+"/compare?base="+sc.older.ID+"&head="+sc.agent.ID), chromedp.WaitVisible(chromedp.CSS(`#compare-records tr[data-record="add"] a.sbs-link`)))
	b.do("side by side from compare", chromedp.Click(chromedp.CSS(`#compare-records tr[data-record="add"] a.sbs-link`)), chromedp.WaitVisible(chromedp.CSS("#sbs")))
	b.want("compare pair", b.text("#side-a")+b.text("#side-b"), "add · trial 1")
}

func strconvQuote(s string) string { return strconv.Quote(s) }
