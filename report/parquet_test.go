package report_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"

	"evals.si/embedded"
	"evals.si/report"
	"evals.si/spec"
)

// The Parquet export has one DOUBLE column per score, named by the score
// (null where a trial has none), and no JSON text column for scores. The run
// is the shipped capitals example, run for real through the embedded engine;
// the file is read back with the parquet library, as an analyst would.
func TestExportParquetScoreColumns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	f, err := spec.Load(filepath.Join("..", "examples", "capitals-offline.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	sum, err := app.Run(ctx, f, embedded.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := report.ExportParquet(ctx, &buf, app.Store(), sum.RunID); err != nil {
		t.Fatal(err)
	}

	pf, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatalf("reading the export back: %v", err)
	}
	types := map[string]parquet.Kind{}
	var order []string
	for _, c := range pf.Schema().Fields() {
		if c.Leaf() {
			types[c.Name()] = c.Type().Kind()
		}
		order = append(order, c.Name())
	}
	for _, name := range []string{"exact-match", "includes"} {
		if k, ok := types[name]; !ok || k != parquet.Double {
			t.Errorf("column %q: kind %v (present %v), want DOUBLE; columns %v", name, k, ok, order)
		}
	}
	if _, ok := types["scores_json"]; ok {
		t.Errorf("a scores_json column is still written: %v", order)
	}
	if order[0] != "run_id" || order[len(order)-2] != "exact-match" || order[len(order)-1] != "includes" {
		t.Errorf("columns %v: want the fixed columns first, then the scores sorted by name", order)
	}

	// A reader's own struct names the columns it wants.
	type row struct {
		RecordID   string   `parquet:"record_id"`
		Status     string   `parquet:"status"`
		ExactMatch *float64 `parquet:"exact-match,optional"`
		Includes   *float64 `parquet:"includes,optional"`
		Events     string   `parquet:"events_json"`
	}
	rows, err := parquet.Read[row](bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatalf("reading rows: %v", err)
	}
	want := map[string][2]float64{"france": {1, 1}, "japan": {1, 1}, "peru": {0, 1}, "kenya": {0, 0}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for _, r := range rows {
		w, ok := want[r.RecordID]
		if !ok || r.ExactMatch == nil || r.Includes == nil {
			t.Errorf("row %+v: unexpected record or a null score", r)
			continue
		}
		if *r.ExactMatch != w[0] || *r.Includes != w[1] {
			t.Errorf("%s: exact-match %v includes %v, want %v", r.RecordID, *r.ExactMatch, *r.Includes, w)
		}
		if r.Status != "finished" {
			t.Errorf("%s: status %q, want finished", r.RecordID, r.Status)
		}
		if r.Events == "" || r.Events == "null" {
			t.Errorf("%s: no events", r.RecordID)
		}
	}
}

// A score named like a fixed column keeps both: the score's column is
// prefixed, so the fixed one is not shadowed.
func TestParquetScoreColumn(t *testing.T) {
	for _, tc := range []struct{ score, want string }{
		{"task-success", "task-success"},
		{"status", "score:status"},
		{"a,b", "a_b"},
	} {
		if got := report.ParquetScoreColumn(tc.score); got != tc.want {
			t.Errorf("ParquetScoreColumn(%q) = %q, want %q", tc.score, got, tc.want)
		}
	}
}
