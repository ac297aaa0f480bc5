package runqueue_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"evals.si/engine"
	"evals.si/evaluate"
	"evals.si/runqueue"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

var evals = []spec.Evaluator{{Name: "exact-match"}}

func submit(t *testing.T, st *store.Store, records, trials int) store.Run {
	t.Helper()
	var recs []spec.Record
	for i := range records {
		recs = append(recs, spec.Record{ID: string(rune('a' + i)), Input: spec.Input{Text: "q"}})
	}
	s := &spec.Spec{Name: "q", Trials: trials, Evaluators: evals}
	run, err := runqueue.Submit(context.Background(), st, runqueue.Submission{Name: "q", Spec: s, Records: recs, Limits: engine.LimitsOf(s)})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func outcome(l *engine.Lease, score float64) *engine.Outcome {
	return &engine.Outcome{RecordID: l.Record.ID, Trial: l.Trial, Attempt: l.Attempt, Status: engine.TrialCompleted,
		Usage:       trajectory.Usage{InputTokens: 3, OutputTokens: 1},
		Evaluations: []evaluate.EvaluatorResult{{Evaluator: "exact-match", Scores: []evaluate.Score{{Name: "exact-match", Value: score}}}}}
}

// Submit queues records × trials in plan order; leased and finished
// through the engine's Queue, the run finalizes from the store alone.
func TestSubmitLeaseFinalize(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	run := submit(t, st, 2, 2)
	q := runqueue.New(st)
	var order []string
	for {
		l, err := q.Lease(ctx, engine.LeaseRequest{Worker: "w", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if l == nil {
			break
		}
		order = append(order, l.Record.ID+string(rune('0'+l.Trial)))
		if err := q.AppendEvents(ctx, l, []trajectory.Event{{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "hi"}}}); err != nil {
			t.Fatal(err)
		}
		score := 1.0
		if l.Record.ID == "b" {
			score = 0
		}
		if err := q.Finish(ctx, l, outcome(l, score), false); err != nil {
			t.Fatal(err)
		}
	}
	if got := order; len(got) != 4 || got[0] != "a0" || got[1] != "b0" || got[2] != "a1" || got[3] != "b1" {
		t.Errorf("lease order %v, want trial by trial in record order", got)
	}
	if done, err := runqueue.Done(ctx, st, run.ID); err != nil || !done {
		t.Fatalf("done: %v %v", done, err)
	}
	sum, err := runqueue.Finalize(ctx, st, run.ID, runqueue.FinalizeOptions{Evaluators: evals})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Status != engine.StatusCompleted || sum.Records != 2 || sum.Trials != 2 || sum.Scores["exact-match"] != 0.5 || sum.Tokens != 16 {
		t.Errorf("summary %+v", sum)
	}
	got, err := st.GetRun(ctx, run.ID)
	if err != nil || got.Status != store.RunCompleted || len(got.Summary) == 0 {
		t.Errorf("stored run %+v, %v", got, err)
	}
}

// A retried attempt is a new attempt carrying the retries used and the
// spend; the summary counts the trial once.
func TestRetryIsANewAttempt(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	run := submit(t, st, 1, 1)
	q := runqueue.New(st)
	l, err := q.Lease(ctx, engine.LeaseRequest{Worker: "w", TTL: time.Minute})
	if err != nil || l == nil {
		t.Fatal(l, err)
	}
	failed := &engine.Outcome{RecordID: "a", Status: engine.TrialErrored, ErrorKind: "sandbox", Error: "fell over",
		Spend: engine.Spend{Usage: trajectory.Usage{InputTokens: 10}}}
	if err := q.Finish(ctx, l, failed, true); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(ctx, l, failed, true); !errors.Is(err, engine.ErrLeaseLost) {
		t.Errorf("finishing the same lease again: %v, want ErrLeaseLost", err)
	}
	l2, err := q.Lease(ctx, engine.LeaseRequest{Worker: "w", TTL: time.Minute})
	if err != nil || l2 == nil {
		t.Fatal(l2, err)
	}
	if l2.Attempt != 1 || l2.RetriesUsed != 1 || l2.Prior.Usage.InputTokens != 10 || l2.TrialID == l.TrialID {
		t.Errorf("second attempt %+v", l2)
	}
	if err := q.Finish(ctx, l2, outcome(l2, 1), false); err != nil {
		t.Fatal(err)
	}
	sum, err := runqueue.Finalize(ctx, st, run.ID, runqueue.FinalizeOptions{Evaluators: evals})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errored != 0 || sum.Attempts != 2 || sum.Scores["exact-match"] != 1 {
		t.Errorf("summary %+v", sum)
	}
	if _, err := runqueue.Completion(outcome(l2, 1), true); err == nil {
		t.Error("a completed outcome was accepted for retry")
	}
}

// A killed run reopens: its running attempts become lost and queue again;
// a run left with unrecorded trials finalizes as failed, counting them as
// errored rather than averaging over fewer trials.
func TestReopenAndUnrecorded(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	run := submit(t, st, 2, 1)
	q := runqueue.New(st)
	held, err := q.Lease(ctx, engine.LeaseRequest{Worker: "dead", TTL: time.Hour})
	if err != nil || held == nil {
		t.Fatal(err)
	}
	sum, err := runqueue.Finalize(ctx, st, run.ID, runqueue.FinalizeOptions{Evaluators: evals, Unrecorded: errors.New("disk gone")})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Status != engine.StatusFailed || sum.Errored != 2 || sum.ErrorsByKind[engine.ErrorKindStore] != 2 {
		t.Errorf("summary of a run with unrecorded trials %+v", sum)
	}
	if r, _ := st.GetRun(ctx, run.ID); r.Status != store.RunFailed {
		t.Errorf("run status %s", r.Status)
	}
	recs := []spec.Record{{ID: "a", Input: spec.Input{Text: "q"}}, {ID: "b", Input: spec.Input{Text: "q"}}}
	if err := runqueue.Reopen(ctx, st, run.ID, recs, 1); err != nil {
		t.Fatal(err)
	}
	if err := q.Heartbeat(ctx, held); !errors.Is(err, engine.ErrLeaseLost) {
		t.Errorf("the dead process's lease still holds after reopen: %v", err)
	}
	n := 0
	for {
		l, err := q.Lease(ctx, engine.LeaseRequest{Worker: "w", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if l == nil {
			break
		}
		n++
		if err := q.Finish(ctx, l, outcome(l, 1), false); err != nil {
			t.Fatal(err)
		}
	}
	if n != 2 {
		t.Errorf("%d attempts after reopen, want both trials", n)
	}
	sum, err = runqueue.Finalize(ctx, st, run.ID, runqueue.FinalizeOptions{Evaluators: evals})
	if err != nil || sum.Status != engine.StatusCompleted || sum.Errored != 0 {
		t.Errorf("after reopen: %+v, %v", sum, err)
	}
}
