package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"evals.si/report"
	"evals.si/store"
)

// TestRunsCompareAndExport runs the good and the wrong fix-calc examples and
// checks that `runs compare` finds the regression (table and --json) and
// that `runs export --format jsonl` writes each trial with its events.
func TestRunsCompareAndExport(t *testing.T) {
	requireBwrap(t)
	db := filepath.Join(t.TempDir(), "evalsi.db")
	var ids []string
	for _, f := range []string{"../../examples/agents/fix-calc-offline.yaml", "../../examples/agents/fix-calc-wrong-offline.yaml"} {
		r := evalsi(t, db, "run", "-f", f, "--json")
		if r.code != 0 {
			t.Fatalf("run %s: exit %d\n%s%s", f, r.code, r.stdout, r.stderr)
		}
		ids = append(ids, r.json.RunID)
	}
	good, wrong := ids[0], ids[1]

	r := evalsi(t, db, "runs", "compare", good, wrong, "--json")
	if r.code != 0 {
		t.Fatalf("compare --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var c report.Comparison
	if err := json.Unmarshal([]byte(r.stdout), &c); err != nil {
		t.Fatalf("compare --json: %v\n%s", err, r.stdout)
	}
	if c.Base.ID != good || c.Head.ID != wrong || len(c.Records) != 1 || c.Records[0].RecordID != "fix-calc" ||
		c.Records[0].Verdict != report.Regressed || strings.Join(c.Records[0].DecidedBy, ",") != "task-success" {
		t.Errorf("comparison: %+v", c)
	}

	r = evalsi(t, db, "runs", "compare", good[:len(good)-2], wrong)
	if r.code != 0 || !strings.Contains(r.stdout, "fix-calc") || !strings.Contains(r.stdout, "regressed") || !strings.Contains(r.stdout, "regressed=1") {
		t.Errorf("compare table: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = evalsi(t, db, "runs", "compare", good, wrong, "--fail-on-regression"); r.code != exitFailUnder || !strings.Contains(r.stderr, "1 record(s) regressed") {
		t.Errorf("--fail-on-regression: exit %d %s", r.code, r.stderr)
	}
	// The other way round, the fix is an improvement.
	if r = evalsi(t, db, "runs", "compare", wrong, good, "--fail-on-regression"); r.code != 0 || !strings.Contains(r.stdout, "improved=1") {
		t.Errorf("reverse compare: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = evalsi(t, db, "runs", "compare", good); r.code != exitUsage {
		t.Errorf("compare with one run: exit %d", r.code)
	}
	if r = evalsi(t, db, "runs", "compare", good, "r-nope"); r.code != exitUsage || !strings.Contains(r.stderr, "not found") {
		t.Errorf("compare with a missing run: exit %d %s", r.code, r.stderr)
	}

	out := filepath.Join(t.TempDir(), "run.jsonl")
	if r = evalsi(t, db, "runs", "export", good, "--format", "jsonl", "-o", out); r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1 {
		t.Fatalf("export wrote %d lines, want 1 trial", len(lines))
	}
	var line report.ExportTrial
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatalf("export line: %v\n%s", err, lines[0])
	}
	if line.RunID != good || line.RecordID != "fix-calc" || line.Scores["task-success"] != 1 || len(line.Events) < 10 ||
		line.Events[0].Seq != 1 || line.Passed == nil || !*line.Passed {
		t.Errorf("export line: run %s record %s scores %v events %d", line.RunID, line.RecordID, line.Scores, len(line.Events))
	}
	if r = evalsi(t, db, "runs", "export", good, "--format", "parquet"); r.code != exitUsage {
		t.Errorf("parquet export to stdout: exit %d, want a usage error", r.code)
	}
	pq := filepath.Join(t.TempDir(), "run.parquet")
	if r = evalsi(t, db, "runs", "export", good, "--format", "parquet", "-o", pq); r.code != 0 {
		t.Fatalf("parquet export: exit %d: %s", r.code, r.stderr)
	}
	pf, err := os.Open(pq)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	st, _ := pf.Stat()
	// Each score is a DOUBLE column of its own, named by the score.
	type row struct {
		RunID       string   `parquet:"run_id"`
		RecordID    string   `parquet:"record_id"`
		Passed      *bool    `parquet:"passed,optional"`
		Events      string   `parquet:"events_json"`
		TaskSuccess *float64 `parquet:"task-success,optional"`
	}
	rows, err := parquet.Read[row](pf, st.Size())
	if err != nil {
		t.Fatalf("reading the parquet file back: %v", err)
	}
	if len(rows) != 1 || rows[0].RunID != good || rows[0].RecordID != "fix-calc" || rows[0].Passed == nil || !*rows[0].Passed ||
		rows[0].TaskSuccess == nil || *rows[0].TaskSuccess != 1 || !strings.Contains(rows[0].Events, `"kind":"tool_call"`) {
		t.Errorf("parquet rows = %+v", rows)
	}
}

// TestView serves the viewer from the command and reads its API.
func TestView(t *testing.T) {
	db := filepath.Join(t.TempDir(), "evalsi.db")
	// An empty store that exists (a --store naming no file is refused).
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"view", "--store", db, "--listen", "127.0.0.1:0"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the viewer's address: %v", err)
	}
	go io.Copy(io.Discard, pr)
	i := strings.Index(line, "http://")
	if i < 0 {
		t.Fatalf("no URL in %q", line)
	}
	url := strings.Fields(line[i:])[0]
	resp, err := http.Get(url + "api/runs")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"runs":[]`) {
		t.Errorf("GET /api/runs: %d %s", resp.StatusCode, body)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("view exited %d", code)
	}
	if code := run(context.Background(), []string{"view", "--store", db, "--listen", "nonsense"}, io.Discard, io.Discard); code != exitUsage {
		t.Errorf("bad --listen: exit %d", code)
	}
}
