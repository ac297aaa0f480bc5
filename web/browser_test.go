package web

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"evals.si/embedded"
	"evals.si/internal/testenv"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

const chromiumPath = "/usr/bin/chromium"

// runExample runs an example spec in process into the app's store and
// returns the run id.
func runExample(t *testing.T, app *embedded.App, path string) string {
	t.Helper()
	f, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Spec.Validate(); err != nil {
		t.Fatal(err)
	}
	sum, err := app.Run(context.Background(), f, embedded.RunOptions{})
	if err != nil {
		t.Fatalf("running %s: %v", path, err)
	}
	if sum.Status != "completed" || sum.Errored != 0 {
		t.Fatalf("running %s: status %s, %d errored", path, sum.Status, sum.Errored)
	}
	return sum.RunID
}

func requireExampleTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bwrap", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool, tool+" is not installed; the fix-calc examples run in a bwrap sandbox with git")
		}
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import pytest").Run(); err != nil {
		testenv.Missing(t, "python3-pytest", "the fix-calc checker runs pytest")
	}
	requireChromium(t)
}

func requireChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "chromium", "Debian's chromium is not installed (apt-get install chromium)")
	}
}

// screenshotDir is $EVALSI_SCREENSHOTS when set (kept after the test), else
// a temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("EVALSI_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// serve serves the viewer over st on a loopback port and returns its URL.
func serve(t *testing.T, st Store) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: New(st, nil)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// newBrowser starts headless Chromium with a fresh profile and nothing
// that phones home; it stops when the test ends.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelTab(); cancelAlloc() })
	return ctx
}

// TestBrowserWalkthrough runs the good and the wrong fix-calc examples, then
// clicks through the viewer in headless Chromium: runs → run → trial →
// compare, checking what each page shows and saving a screenshot of each.
func TestBrowserWalkthrough(t *testing.T) {
	requireExampleTools(t)
	dir := t.TempDir()
	app, err := embedded.Open(context.Background(), embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	good := runExample(t, app, "../examples/agents/fix-calc-offline.yaml")
	wrong := runExample(t, app, "../examples/agents/fix-calc-wrong-offline.yaml")

	base := serve(t, app.Store())
	shots := screenshotDir(t)
	ctx := newBrowser(t)

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return s
	}
	shoot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(shots, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", p)
	}
	mustContain := func(page, got string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(got, w) {
				t.Errorf("%s page lacks %q:\n%s", page, w, got)
			}
		}
	}

	// Runs: both runs are listed.
	do("opening the runs page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#runs tr[data-run="`+good+`"]`)))
	mustContain("runs", text("#runs"), "fix-calc-offline", "fix-calc-wrong-offline", good, wrong, "task-success 1", "task-success 0", "1/1")
	shoot("1-runs.png")

	// Run: click the good run's name.
	do("opening the run", chromedp.Click(chromedp.CSS(`#runs tr[data-run="`+good+`"] a.run-name`)), chromedp.WaitVisible(chromedp.CSS("#trials a.trial-link")))
	mustContain("run", text("main"), "fix-calc-offline", "Scores by evaluator", "task-success", "code-quality", "Isolation", "bwrap")
	mustContain("run trials", text("#trials"), "fix-calc", "finished", "pass")
	shoot("2-run.png")

	// Trial: the timeline shows the tool calls, the diff the fix.
	do("opening the trial", chromedp.Click(chromedp.CSS("#trials a.trial-link")), chromedp.WaitVisible(chromedp.CSS(`#timeline .ev.k-tool_result`)))
	mustContain("trial timeline", text("#timeline"), "write_file", "bash", "model call", "tokens")
	mustContain("trial diff", text("#diff"), "+    return a + b")
	mustContain("trial checker", text("#checker"), "pass", "passed")
	shoot("3-trial.png")

	// Back to the run, compare it (base) with the wrong run (head).
	do("back to the run", chromedp.Click(chromedp.CSS("#run-link")), chromedp.WaitVisible(chromedp.CSS("#compare-with")))
	do("comparing", chromedp.SetValue(chromedp.CSS("#compare-with"), wrong), chromedp.Click(chromedp.CSS("#compare-go")),
		chromedp.WaitVisible(chromedp.CSS(`#compare-records tr[data-record="fix-calc"]`)))
	row := text(`#compare-records tr[data-record="fix-calc"]`)
	mustContain("compare", row, "regressed", "task-success")
	mustContain("compare counts", text("#counts"), "1 regressed")
	verdict, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`#compare-records tr[data-record="fix-calc"]`), "data-verdict"))
	if err != nil || verdict.Value != "regressed" {
		t.Errorf("fix-calc verdict attribute = %+v (%v), want regressed", verdict, err)
	}
	shoot("4-compare.png")
}

// TestBrowserLive opens the pages of a run in progress and checks that they
// follow the store without a reload: a trial finishing updates the run
// page, new events appear on the trial page, and the live marker goes away
// when the run ends.
func TestBrowserLive(t *testing.T) {
	requireChromium(t)
	bg := context.Background()
	st, err := store.Open(bg, filepath.Join(t.TempDir(), "evalsi.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	run, err := st.CreateRun(bg, store.RunInput{Spec: &spec.Spec{Name: "live"}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.StartTrial(bg, store.TrialInput{RunID: run.ID, RecordID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := st.UpsertTrial(bg, store.TrialInput{RunID: run.ID, RecordID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	emit := func(trialID, text string) {
		t.Helper()
		if err := st.AppendEvent(bg, trialID, trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: text}}); err != nil {
			t.Fatal(err)
		}
	}
	emit(first.ID, "setting up")

	base := serve(t, st)
	ctx := newBrowser(t)
	shots := screenshotDir(t)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	do("opening the running run", chromedp.Navigate(base+"/runs/"+run.ID), chromedp.WaitVisible(chromedp.CSS("#stat-done")), chromedp.WaitVisible(chromedp.CSS("#live")))
	if s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#stat-done"))); err != nil || !strings.Contains(s, "0/2") {
		t.Errorf("trials done = %q (%v), want 0/2", s, err)
	}
	pass := true
	if err := st.PutScores(bg, first.ID, []store.Score{{Name: "task-success", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishTrial(bg, first.ID, store.TrialResult{Status: store.TrialFinished, Passed: &pass}); err != nil {
		t.Fatal(err)
	}
	do("waiting for the finished trial to show", chromedp.WaitVisible(chromedp.CSS(`#trials tr[data-trial="`+first.ID+`"] .st-finished`)))
	if s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#stat-done"))); err != nil || !strings.Contains(s, "1/2") {
		t.Errorf("trials done = %q (%v), want 1/2", s, err)
	}
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		os.WriteFile(filepath.Join(shots, "5-live-run.png"), png, 0o644)
	}

	if _, err := st.StartTrial(bg, store.TrialInput{RunID: run.ID, RecordID: "b"}); err != nil {
		t.Fatal(err)
	}
	emit(second.ID, "first step")
	do("opening the running trial", chromedp.Navigate(base+"/trials/"+second.ID), chromedp.WaitVisible(chromedp.CSS(`#timeline .ev[data-seq="1"]`)))
	emit(second.ID, "a step that happened while the page was open")
	do("waiting for the new event", chromedp.WaitVisible(chromedp.CSS(`#timeline .ev[data-seq="2"]`)))
	if s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#timeline"))); err != nil || !strings.Contains(s, "while the page was open") {
		t.Errorf("timeline = %q (%v)", s, err)
	}
	if err := st.FinishTrial(bg, second.ID, store.TrialResult{Status: store.TrialErrored, ErrorKind: "sandbox", Error: "bwrap died"}); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishRun(bg, run.ID, store.RunCompleted, nil, ""); err != nil {
		t.Fatal(err)
	}
	do("waiting for the trial to end", chromedp.WaitNotVisible(chromedp.CSS("#live")), chromedp.WaitVisible(chromedp.CSS(".st-errored")))
	do("back to the run", chromedp.Navigate(base+"/runs/"+run.ID), chromedp.WaitVisible(chromedp.CSS("#errors")))
	if s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#errors"))); err != nil || !strings.Contains(s, "sandbox") || !strings.Contains(s, "bwrap died") {
		t.Errorf("errors by kind = %q (%v)", s, err)
	}
}

// TestBrowserPaging opens a trial of 1,203 events: the page renders the
// first 500 and fetches the next pages as the reader scrolls to the end.
func TestBrowserPaging(t *testing.T) {
	requireChromium(t)
	st := openStore(t)
	_, tr := seedTrial(t, st, "long", "long", 1, 1203)
	base := serve(t, st)
	ctx := newBrowser(t)
	// A tool call and its result are one block: a block lists the seqs of
	// the events it shows.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/trials/"+tr.ID), chromedp.WaitVisible(chromedp.CSS(`#timeline .ev[data-seqs~="500"]`))); err != nil {
		t.Fatal(err)
	}
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll('#timeline .ev')].reduce((n, b) => n + b.dataset.seqs.split(' ').length, 0)`))
	if err != nil || n != 500 {
		t.Errorf("first render shows %d events (%v), want one page of 500", n, err)
	}
	for _, seq := range []string{"1000", "1203"} {
		if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, document.body.scrollHeight)`),
			chromedp.WaitVisible(chromedp.CSS(`#timeline .ev[data-seqs~="`+seq+`"]`))); err != nil {
			t.Fatalf("scrolling to event %s: %v", seq, err)
		}
	}
	if s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#more"))); err != nil || !strings.Contains(s, "1,203 events") {
		t.Errorf("end marker %q (%v)", s, err)
	}
}
