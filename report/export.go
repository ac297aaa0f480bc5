package report

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"evals.si/store"
	"evals.si/trajectory"
)

// ExportStore is what ExportJSONL reads; *store.Store has it.
type ExportStore interface {
	DetailStore
	Events(ctx context.Context, trialID string, afterSeq, limit int) ([]trajectory.Event, error)
}

// ExportTrial is one line of `evalsi runs export --format jsonl`: a trial
// with its run, record, verdict, scores and whole trajectory. The format is
// meant for analysis and for training data (SFT/RL), so each line stands on
// its own.
type ExportTrial struct {
	RunID     string             `json:"run_id"`
	RunName   string             `json:"run_name"`
	TrialID   string             `json:"trial_id"`
	RecordID  string             `json:"record_id"`
	Trial     int                `json:"trial"`
	Attempt   int                `json:"attempt"`
	Status    string             `json:"status"`
	Passed    *bool              `json:"passed"`
	ErrorKind string             `json:"error_kind,omitempty"`
	Error     string             `json:"error,omitempty"`
	Record    json.RawMessage    `json:"record,omitempty"`
	Output    string             `json:"output"`
	Isolation json.RawMessage    `json:"isolation,omitempty"`
	Usage     trajectory.Usage   `json:"usage"`
	CostUSD   float64            `json:"cost_usd"`
	Scores    map[string]float64 `json:"scores"`
	// Events is written after the other fields, streamed page by page.
	Events []trajectory.Event `json:"events"`
}

// exportPage is how many events are read at once, so a trial of 100,000
// events does not sit in memory whole.
const exportPage = 2000

// ExportJSONL writes one JSON object per trial of the run (id or unique
// prefix), in record then trial order.
func ExportJSONL(ctx context.Context, w io.Writer, st ExportStore, runID string) error {
	d, err := LoadRunDetail(ctx, st, runID)
	if err != nil {
		return fmt.Errorf("exporting run %s: %w", runID, err)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	for _, t := range d.Trials {
		line := ExportTrial{
			RunID: d.Run.ID, RunName: d.Run.Name, TrialID: t.ID, RecordID: t.RecordID, Trial: t.Trial, Attempt: t.Attempt,
			Status: t.Status, Passed: t.Passed, ErrorKind: t.ErrorKind, Error: t.Error, Record: t.Record, Output: t.Output,
			Isolation: t.Isolation, Usage: t.Usage, CostUSD: t.CostUSD, Scores: map[string]float64{},
		}
		for _, s := range d.Scores[t.ID] {
			line.Scores[s.Name] = s.Value
		}
		if err := writeTrialLine(ctx, bw, st, line); err != nil {
			return fmt.Errorf("exporting run %s: trial %s: %w", d.Run.ID, t.ID, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("exporting run %s: %w", d.Run.ID, err)
	}
	return nil
}

// writeTrialLine writes the trial's fields, then streams its events into the
// "events" array that closes the object.
func writeTrialLine(ctx context.Context, w *bufio.Writer, st ExportStore, line ExportTrial) error {
	head, err := json.Marshal(line)
	if err != nil {
		return err
	}
	// head ends in `"events":null}`; keep everything before the null.
	const tail = `null}`
	if !bytes.HasSuffix(head, []byte(tail)) {
		return fmt.Errorf("encoding: unexpected JSON layout")
	}
	w.Write(head[:len(head)-len(tail)])
	w.WriteByte('[')
	after, first := 0, true
	for {
		evs, err := st.Events(ctx, line.TrialID, after, exportPage)
		if err != nil {
			return err
		}
		for _, e := range evs {
			b, err := json.Marshal(e)
			if err != nil {
				return fmt.Errorf("encoding event %d: %w", e.Seq, err)
			}
			if !first {
				w.WriteByte(',')
			}
			first = false
			w.Write(b)
			after = e.Seq
		}
		if len(evs) < exportPage {
			break
		}
	}
	_, err = w.WriteString("]}\n")
	return err
}

var _ ExportStore = (*store.Store)(nil)
