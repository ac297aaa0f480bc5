package regress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// LocalProject is the project of embedded mode, which has no projects.
const LocalProject = "local"

// PromotedFromKey is the metadata key of a promoted record's origin
// (PromotedFrom).
const PromotedFromKey = "promoted_from"

// Options say what Promote promotes, and where to.
type Options struct {
	// Dataset names the dataset: <Dir>/promoted/<Project>/<Dataset>.jsonl.
	Dataset string
	// When is the CEL condition a trial must meet (see condition).
	When string
	// IncludeOutputs keeps the trial's output, scores and trajectory in
	// metadata.promoted_from, for re-scoring without running again.
	IncludeOutputs bool
	// Project owns the dataset (LocalProject in embedded mode).
	Project string
	// Dir is the datasets directory (embedded: "datasets" beside the store;
	// a server: its datasets_dir).
	Dir string
}

// PromotedFrom is metadata.promoted_from of a promoted record. Output,
// Scores and Events are set with IncludeOutputs.
type PromotedFrom struct {
	RunID    string             `json:"run_id"`
	RecordID string             `json:"record_id"`
	Trial    int                `json:"trial"`
	TrialID  string             `json:"trial_id"`
	Errored  bool               `json:"errored,omitempty"`
	Output   *string            `json:"output,omitempty"`
	Scores   map[string]float64 `json:"scores,omitempty"`
	Events   []trajectory.Event `json:"events,omitempty"`
}

// PromoteStore is what Promote reads.
type PromoteStore interface {
	RunReader
	EventReader
}

// InvalidOptionError is a bad option: a condition that does not compile, a
// dataset or project name that is not a plain name. A CLI exits 2 on it, a
// server answers 400.
type InvalidOptionError struct {
	Option string
	Err    error
}

func (e *InvalidOptionError) Error() string { return fmt.Sprintf("--%s: %v", e.Option, e.Err) }
func (e *InvalidOptionError) Unwrap() error { return e.Err }

// EvalError is a condition that failed on one trial (a score the trial does
// not have, a type mismatch, the cost limit): the condition needs fixing,
// and nothing was promoted.
type EvalError struct {
	RecordID string
	Trial    int
	Errored  bool
	Err      error
}

func (e *EvalError) Error() string {
	hint := ""
	switch msg := e.Err.Error(); {
	case e.Errored && strings.Contains(msg, "no such key"):
		hint = ` (the trial errored, so it has no scores: guard with "errored || ..." or "!errored && ...")`
	case strings.Contains(msg, "no such key"):
		hint = ` (test for a key first: "'name' in scores && ...")`
	case strings.Contains(msg, "cost limit"):
		hint = " (the condition does too much work for one trial)"
	}
	return fmt.Sprintf("--when on record %s trial %d: %v%s", e.RecordID, e.Trial, e.Err, hint)
}
func (e *EvalError) Unwrap() error { return e.Err }

// nameRE is a dataset or project name: one path element that cannot be "."
// or "..", nor hidden.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// DatasetPath is the file Promote appends to.
func DatasetPath(dir, project, name string) (string, error) {
	if err := checkTarget(dir, project, name); err != nil {
		return "", err
	}
	return dir + "/promoted/" + project + "/" + name + ".jsonl", nil
}

func checkTarget(dir, project, name string) error {
	switch {
	case dir == "":
		return errors.New("promoting: no datasets directory")
	case !nameRE.MatchString(name):
		return &InvalidOptionError{Option: "dataset", Err: fmt.Errorf("%q is not a dataset name: use letters, digits, '.', '_' and '-', starting with a letter or digit", name)}
	case !nameRE.MatchString(project):
		return &InvalidOptionError{Option: "project", Err: fmt.Errorf("%q is not a project name", project)}
	}
	return nil
}

// Promote appends to <Dir>/promoted/<Project>/<Dataset>.jsonl the records of
// run runID (id or unique prefix) whose trials meet the condition When, and
// returns how many it added and how many met it but were there already.
//
// A promoted record is the record as the run stored it, with id
// <run>/<record> and its origin in metadata.promoted_from. A record gives at
// most one promoted record, from its first trial (lowest index) that meets
// the condition, so promoting the same run again adds nothing. Unfinished
// trials are not considered; errored ones are, with errored true and no
// scores. The condition is evaluated on every trial before anything is
// written: an error on any of them writes nothing.
func Promote(ctx context.Context, st PromoteStore, runID string, o Options) (added, skipped int, err error) {
	if err := checkTarget(o.Dir, o.Project, o.Dataset); err != nil {
		return 0, 0, err
	}
	cond, err := compileCondition(o.When)
	if err != nil {
		return 0, 0, err
	}
	r, err := loadRun(ctx, st, runID)
	if err != nil {
		return 0, 0, err
	}
	// Trials in record order (as enqueued), then trial index.
	order := map[string]int{}
	trials := slices.Clone(r.trials)
	for _, t := range trials {
		if _, ok := order[t.RecordID]; !ok {
			order[t.RecordID] = len(order)
		}
	}
	slices.SortStableFunc(trials, func(a, b store.Trial) int {
		if c := order[a.RecordID] - order[b.RecordID]; c != 0 {
			return c
		}
		return a.Trial - b.Trial
	})
	chosen := map[string]bool{}
	var picked []store.Trial
	var cost uint64
	for _, t := range trials {
		if t.Unfinished() || t.Status == store.TrialLost || t.Status == store.TrialCancelled {
			continue
		}
		errored := t.Status == store.TrialErrored
		if _, err := r.record(t); err != nil {
			return 0, 0, err
		}
		ok, c, err := cond.holds(ctx, trialVars{scores: r.scoreMap(t), errored: errored, trial: t.Trial, record: t.Record})
		if cost += c; err == nil && cost > runCostLimit {
			err = fmt.Errorf("the condition's work over the run passed the cost limit of %d", runCostLimit)
		}
		if err != nil {
			if ctx.Err() != nil {
				return 0, 0, ctx.Err()
			}
			return 0, 0, &EvalError{RecordID: t.RecordID, Trial: t.Trial, Errored: errored, Err: err}
		}
		if ok && !chosen[t.RecordID] {
			chosen[t.RecordID] = true
			picked = append(picked, t)
		}
	}
	recs := make([]spec.Record, 0, len(picked))
	for _, t := range picked {
		rec, err := promoted(ctx, st, r, t, o.IncludeOutputs)
		if err != nil {
			return 0, 0, err
		}
		recs = append(recs, rec)
	}
	path, _ := DatasetPath(o.Dir, o.Project, o.Dataset)
	added, skipped, err = appendRecords(ctx, o.Dir, o.Project, o.Dataset, recs)
	if err != nil {
		return 0, 0, fmt.Errorf("promoting run %s into %s: %w", r.run.ID, path, err)
	}
	return added, skipped, nil
}

// promoted is the dataset record promoting trial t gives.
func promoted(ctx context.Context, st EventReader, r storedRun, t store.Trial, withOutputs bool) (spec.Record, error) {
	rec, err := r.record(t)
	if err != nil {
		return spec.Record{}, err
	}
	from := PromotedFrom{RunID: r.run.ID, RecordID: t.RecordID, Trial: t.Trial, TrialID: t.ID, Errored: t.Status == store.TrialErrored}
	if withOutputs {
		out := t.Output
		from.Output = &out
		from.Scores = r.scoreMap(t)
		if from.Events, err = allEvents(ctx, st, t.ID); err != nil {
			return spec.Record{}, fmt.Errorf("reading the trajectory of trial %s (record %s): %w", t.ID, t.RecordID, err)
		}
	}
	rec.ID = r.run.ID + "/" + t.RecordID
	if rec.Metadata, err = withMetadata(rec.Metadata, PromotedFromKey, from); err != nil {
		return spec.Record{}, fmt.Errorf("record %s: %w", t.RecordID, err)
	}
	return rec, nil
}

// eventPage bounds one read of a trajectory.
const eventPage = 2000

func allEvents(ctx context.Context, st EventReader, trialID string) ([]trajectory.Event, error) {
	var all []trajectory.Event
	after := 0
	for {
		evs, err := st.Events(ctx, trialID, after, eventPage)
		if err != nil {
			return nil, err
		}
		all = append(all, evs...)
		if len(evs) < eventPage {
			return all, nil
		}
		after = evs[len(evs)-1].Seq
	}
}

// recordLine encodes one JSONL line.
func recordLine(rec spec.Record) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encoding record %s: %w", rec.ID, err)
	}
	return append(b, '\n'), nil
}
