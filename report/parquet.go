package report

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"

	"evals.si/trajectory"
)

// ParquetTrial is one row of `evalsi runs export --format parquet`: the
// same fields as a JSONL line, flat, with the record, isolation report,
// scores and events as JSON text columns (their shapes vary too much for a
// fixed schema).
type ParquetTrial struct {
	RunID        string  `parquet:"run_id"`
	RunName      string  `parquet:"run_name"`
	TrialID      string  `parquet:"trial_id"`
	RecordID     string  `parquet:"record_id"`
	Trial        int64   `parquet:"trial"`
	Attempt      int64   `parquet:"attempt"`
	Status       string  `parquet:"status"`
	Passed       *bool   `parquet:"passed,optional"`
	ErrorKind    string  `parquet:"error_kind"`
	Error        string  `parquet:"error"`
	Output       string  `parquet:"output"`
	InputTokens  int64   `parquet:"input_tokens"`
	OutputTokens int64   `parquet:"output_tokens"`
	CostUSD      float64 `parquet:"cost_usd"`
	Record       string  `parquet:"record_json"`
	Isolation    string  `parquet:"isolation_json"`
	Scores       string  `parquet:"scores_json"`
	Events       string  `parquet:"events_json"`
}

// ExportParquet writes the run's trials as a Parquet file, one row per
// trial in record then trial order. Rows are flushed one by one, so only
// one trial's events are in memory at a time.
func ExportParquet(ctx context.Context, w io.Writer, st ExportStore, runID string) error {
	d, err := LoadRunDetail(ctx, st, runID)
	if err != nil {
		return fmt.Errorf("exporting run %s: %w", runID, err)
	}
	pw := parquet.NewGenericWriter[ParquetTrial](w)
	for _, t := range d.Trials {
		scores := map[string]float64{}
		for _, s := range d.Scores[t.ID] {
			scores[s.Name] = s.Value
		}
		sj, _ := json.Marshal(scores)
		events, err := allEvents(ctx, st, t.ID)
		if err != nil {
			return fmt.Errorf("exporting run %s: trial %s: %w", d.Run.ID, t.ID, err)
		}
		ej, err := json.Marshal(events)
		if err != nil {
			return fmt.Errorf("exporting run %s: trial %s: encoding events: %w", d.Run.ID, t.ID, err)
		}
		row := ParquetTrial{
			RunID: d.Run.ID, RunName: d.Run.Name, TrialID: t.ID, RecordID: t.RecordID,
			Trial: int64(t.Trial), Attempt: int64(t.Attempt), Status: t.Status, Passed: t.Passed,
			ErrorKind: t.ErrorKind, Error: t.Error, Output: t.Output,
			InputTokens: int64(t.Usage.InputTokens), OutputTokens: int64(t.Usage.OutputTokens), CostUSD: t.CostUSD,
			Record: string(t.Record), Isolation: string(t.Isolation), Scores: string(sj), Events: string(ej),
		}
		if _, err := pw.Write([]ParquetTrial{row}); err != nil {
			return fmt.Errorf("exporting run %s: writing trial %s: %w", d.Run.ID, t.ID, err)
		}
		if err := pw.Flush(); err != nil {
			return fmt.Errorf("exporting run %s: %w", d.Run.ID, err)
		}
	}
	if err := pw.Close(); err != nil {
		return fmt.Errorf("exporting run %s: closing parquet file: %w", d.Run.ID, err)
	}
	return nil
}

func allEvents(ctx context.Context, st ExportStore, trialID string) ([]trajectory.Event, error) {
	var out []trajectory.Event
	after := 0
	for {
		evs, err := st.Events(ctx, trialID, after, exportPage)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
		if len(evs) < exportPage {
			return out, nil
		}
		after = evs[len(evs)-1].Seq
	}
}
