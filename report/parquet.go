package report

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"github.com/parquet-go/parquet-go"

	"evals.si/trajectory"
)

// ParquetTrial holds the fixed columns of a row of `evalsi runs export
// --format parquet`: the same fields as a JSONL line, flat, with the record,
// isolation report and events as JSON text columns (their shapes vary too
// much for a fixed schema). After them, each score of the run is a column of
// its own (see ExportParquet).
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
	Events       string  `parquet:"events_json"`
}

// ParquetScoreColumn is the column a score is written to: the score's own
// name, unless that is one of ParquetTrial's columns (then "score:" and the
// name). Commas, which Parquet struct tags cannot carry, become "_".
func ParquetScoreColumn(score string) string {
	name := strings.ReplaceAll(score, ",", "_")
	if fixedParquetColumns()[name] {
		return "score:" + name
	}
	return name
}

func fixedParquetColumns() map[string]bool {
	t := reflect.TypeOf(ParquetTrial{})
	cols := map[string]bool{}
	for _, i := range parquetColumnFields() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("parquet"), ",")
		cols[name] = true
	}
	return cols
}

// parquetColumnFields are the indexes of ParquetTrial's fields that are
// columns, in order.
func parquetColumnFields() []int {
	t := reflect.TypeOf(ParquetTrial{})
	var out []int
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).Tag.Get("parquet") != "-" {
			out = append(out, i)
		}
	}
	return out
}

// parquetRowType is ParquetTrial's columns followed by one optional double
// per score (null where a trial has no such score: it errored, or an
// evaluator did not apply).
func parquetRowType(scores []string) reflect.Type {
	base := reflect.TypeOf(ParquetTrial{})
	var fields []reflect.StructField
	for _, i := range parquetColumnFields() {
		f := base.Field(i)
		fields = append(fields, reflect.StructField{Name: f.Name, Type: f.Type, Tag: f.Tag})
	}
	for i, s := range scores {
		fields = append(fields, reflect.StructField{
			Name: fmt.Sprintf("Score%d", i),
			Type: reflect.TypeOf((*float64)(nil)),
			Tag:  reflect.StructTag(fmt.Sprintf(`parquet:"%s,optional"`, ParquetScoreColumn(s))),
		})
	}
	return reflect.StructOf(fields)
}

// ExportParquet writes the run's trials as a Parquet file, one row per
// trial in record then trial order, with one DOUBLE column per score name
// the run has, sorted by name. Rows are flushed one by one, so only one
// trial's events are in memory at a time.
func ExportParquet(ctx context.Context, w io.Writer, st ExportStore, runID string) error {
	d, err := LoadRunDetail(ctx, st, runID)
	if err != nil {
		return fmt.Errorf("exporting run %s: %w", runID, err)
	}
	var names []string
	seen := map[string]bool{}
	for _, scores := range d.Scores {
		for _, s := range scores {
			col := ParquetScoreColumn(s.Name)
			if !seen[col] {
				seen[col] = true
				names = append(names, s.Name)
			}
		}
	}
	sort.Strings(names)
	index := map[string]int{}
	for i, n := range names {
		index[ParquetScoreColumn(n)] = i
	}
	typ := parquetRowType(names)
	pw := parquet.NewWriter(w, parquet.SchemaOf(reflect.New(typ).Interface()))
	columns := parquetColumnFields()
	for _, t := range d.Trials {
		events, err := allEvents(ctx, st, t.ID)
		if err != nil {
			return fmt.Errorf("exporting run %s: trial %s: %w", d.Run.ID, t.ID, err)
		}
		ej, err := json.Marshal(events)
		if err != nil {
			return fmt.Errorf("exporting run %s: trial %s: encoding events: %w", d.Run.ID, t.ID, err)
		}
		base := reflect.ValueOf(ParquetTrial{
			RunID: d.Run.ID, RunName: d.Run.Name, TrialID: t.ID, RecordID: t.RecordID,
			Trial: int64(t.Trial), Attempt: int64(t.Attempt), Status: t.Status, Passed: t.Passed,
			ErrorKind: t.ErrorKind, Error: t.Error, Output: t.Output,
			InputTokens: int64(t.Usage.InputTokens), OutputTokens: int64(t.Usage.OutputTokens), CostUSD: t.CostUSD,
			Record: string(t.Record), Isolation: string(t.Isolation), Events: string(ej),
		})
		row := reflect.New(typ).Elem()
		for i, f := range columns {
			row.Field(i).Set(base.Field(f))
		}
		for _, s := range d.Scores[t.ID] {
			v := s.Value
			row.Field(len(columns) + index[ParquetScoreColumn(s.Name)]).Set(reflect.ValueOf(&v))
		}
		if err := pw.Write(row.Addr().Interface()); err != nil {
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
