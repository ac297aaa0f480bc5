package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"evals.si/engine"
	"evals.si/runqueue"
	"evals.si/spec"
	"evals.si/store"
)

// The queue's cancellation (store.Queue.CancelRun): cases run by Queue.

// queueCancelEndsUnfinishedAttempts: cancelling a run with finished,
// errored, running and pending attempts cancels exactly the running and
// pending ones (neither a result nor an error), records the time, leaves
// other runs alone, and from then on no lease hands out a trial of it, the
// held lease's Heartbeat, AppendLeased and Complete fail with ErrCancelled
// (an ErrLeaseLost) and store nothing, Requeue has nothing of it to take
// back, and trials enqueued into it are born cancelled.
func queueCancelEndsUnfinishedAttempts(t *testing.T, q *queueSuite) {
	ctx := t.Context()
	a := q.run("a", store.RunInput{}, "done/0", "broke/0", "busy/0", "wait/0", "wait/1")
	other := q.run("b", store.RunInput{}, "o/0")
	q.complete(q.lease(store.LeaseRequest{Runs: []string{a.ID}}), queueFinished())
	q.complete(q.lease(store.LeaseRequest{Runs: []string{a.ID}}), store.Completion{Result: store.TrialResult{Status: store.TrialErrored, ErrorKind: "sandbox", Error: "bwrap died"}})
	held := q.lease(store.LeaseRequest{Runs: []string{a.ID}, Worker: "busy-worker"})
	if err := q.b.AppendLeased(ctx, held, queueLogs("one", "two")); err != nil {
		t.Fatal(err)
	}

	before := time.Now().Add(-time.Second)
	got, err := q.b.CancelRun(ctx, a.ID)
	if err != nil {
		t.Fatalf("CancelRun: %v", err)
	}
	if got.ID != a.ID || got.Status != store.RunCancelled || got.FinishedAt.Before(before) || got.FinishedAt.After(time.Now().Add(time.Second)) || got.Summary != nil || got.Error != "" {
		t.Fatalf("CancelRun = %+v; want run %s cancelled now, with no summary or error", got, a.ID)
	}
	if read, err := q.b.GetRun(ctx, a.ID); err != nil || read.Status != store.RunCancelled || !read.FinishedAt.Equal(got.FinishedAt) {
		t.Fatalf("GetRun after cancel = %+v, %v; want what CancelRun returned", read, err)
	}
	want := []string{"done/0#1:finished", "broke/0#1:errored", "busy/0#1:cancelled", "wait/0#1:cancelled", "wait/1#1:cancelled"}
	at := q.attempts(a.ID)
	q.wantStates("attempts after cancel", at, want...)
	for _, tr := range at[2:] {
		if tr.Passed != nil || tr.ErrorKind != "" || tr.Error != "" || tr.FinishedAt.IsZero() {
			t.Errorf("cancelled attempt %s: passed %v, error %q/%q, finished %v; want no verdict, no error, a finish time", queueKey(tr.RecordID, tr.Trial), tr.Passed, tr.ErrorKind, tr.Error, tr.FinishedAt)
		}
	}
	if at[2].LeaseOwner != "busy-worker" || at[2].LeaseEpoch != held.Epoch {
		t.Errorf("the cancelled running attempt: owner %q epoch %d; want its last lease (busy-worker, %d) kept", at[2].LeaseOwner, at[2].LeaseEpoch, held.Epoch)
	}
	if n, err := q.b.CountTrials(ctx, a.ID); err != nil || !reflect.DeepEqual(n, map[string]int{store.TrialFinished: 1, store.TrialErrored: 1, store.TrialCancelled: 3}) {
		t.Errorf("CountTrials = %v, %v; want 1 finished, 1 errored, 3 cancelled", n, err)
	}
	q.wantStates("the other run", q.attempts(other.ID), "o/0#1:pending")

	// No lease of it again; the other run still leases.
	q.noWork(store.LeaseRequest{Runs: []string{a.ID}})
	if l := q.lease(store.LeaseRequest{}); l.RunID != other.ID {
		t.Fatalf("after cancel, Lease = run %s, want %s", l.RunID, other.ID)
	}

	// The held lease is over: told why, nothing stored.
	full := queueFinished()
	full.Scores = []store.Score{{Name: "pass", Value: 1}}
	full.Evaluations = json.RawMessage(`[{"evaluator": "exact-match"}]`)
	full.Artifacts = []store.ArtifactInput{{Name: "diff.patch", Data: []byte("+x")}}
	for name, write := range map[string]func() error{
		"Heartbeat":    func() error { _, err := q.b.Heartbeat(ctx, held, time.Hour); return err },
		"AppendLeased": func() error { return q.b.AppendLeased(ctx, held, queueLogs("late")) },
		"Complete":     func() error { return q.b.Complete(ctx, held, full) },
		"Complete{Retry}": func() error {
			return q.b.Complete(ctx, held, store.Completion{Retry: true, Result: store.TrialResult{Status: store.TrialErrored, ErrorKind: "sandbox"}})
		},
	} {
		err := write()
		if !errors.Is(err, store.ErrCancelled) || !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("%s under the cancelled lease = %v; want ErrCancelled, which is an ErrLeaseLost", name, err)
		}
	}
	q.nothingStored(a.ID, held.TrialID, 2)
	if back, err := q.b.Requeue(ctx, store.RequeueRequest{RunID: a.ID, All: true}); err != nil || len(back) != 0 {
		t.Errorf("Requeue{RunID, All} of the cancelled run = %v, %v; want nothing to take back", queueStates(back), err)
	}

	// Enqueue stays idempotent, and what it adds is cancelled at once.
	q.enqueue(a.ID, "wait/0", "late/0")
	q.wantStates("attempts after a late enqueue", q.attempts(a.ID), append(want, "late/0#1:cancelled")...)
	q.noWork(store.LeaseRequest{Runs: []string{a.ID}})
	if n, err := q.b.CountTrials(ctx, a.ID); err != nil || n[store.TrialPending]+n[store.TrialRunning] != 0 {
		t.Errorf("CountTrials after a late enqueue = %v, %v; want nothing unfinished", n, err)
	}
	if runs, err := q.b.ListRuns(ctx, store.ListRunsOptions{Status: store.RunCancelled}); err != nil || !reflect.DeepEqual(ids(runs), []string{a.ID}) {
		t.Errorf("ListRuns{Status: cancelled} = %v, %v; want [%s]", ids(runs), err, a.ID)
	}
}

// queueCancelIsIdempotent: cancelling a cancelled run, a finished one or
// an interrupted one returns it unchanged and changes no attempt; FinishRun
// records a cancelled run's summary but keeps it cancelled; an unknown run
// is ErrNotFound and an ambiguous prefix ErrAmbiguous, changing nothing;
// a unique prefix names its run.
func queueCancelIsIdempotent(t *testing.T, q *queueSuite) {
	ctx := t.Context()
	a := q.run("a", store.RunInput{}, "r/0", "r/1")
	q.lease(store.LeaseRequest{Runs: []string{a.ID}})
	first, err := q.b.CancelRun(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.b.FinishRun(ctx, a.ID, store.RunCompleted, json.RawMessage(`{"status": "cancelled"}`), ""); err != nil {
		t.Fatal(err)
	}
	finalized, err := q.b.GetRun(ctx, a.ID)
	if err != nil || finalized.Status != store.RunCancelled || !queueSameJSON(finalized.Summary, []byte(`{"status": "cancelled"}`)) {
		t.Fatalf("after FinishRun(completed) of the cancelled run: %+v, %v; want it still cancelled, with the summary", finalized, err)
	}
	if !finalized.FinishedAt.After(first.FinishedAt) && !finalized.FinishedAt.Equal(first.FinishedAt) {
		t.Errorf("finish time went back from %v to %v", first.FinishedAt, finalized.FinishedAt)
	}

	done := q.run("b", store.RunInput{}, "s/0")
	q.complete(q.lease(store.LeaseRequest{Runs: []string{done.ID}}), queueFinished())
	if err := q.b.FinishRun(ctx, done.ID, store.RunCompleted, json.RawMessage(`{"status": "completed"}`), ""); err != nil {
		t.Fatal(err)
	}
	paused := q.run("c", store.RunInput{}, "p/0")
	if err := q.b.FinishRun(ctx, paused.ID, store.RunInterrupted, nil, ""); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a.ID, done.ID, paused.ID} {
		before, err := q.b.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		attempts := queueStates(q.attempts(id))
		got, err := q.b.CancelRun(ctx, id)
		if err != nil {
			t.Fatalf("CancelRun(%s) again: %v", id, err)
		}
		sameSummary := len(got.Summary) == 0 && len(before.Summary) == 0 || queueSameJSON(got.Summary, before.Summary)
		if got.Status != before.Status || !got.FinishedAt.Equal(before.FinishedAt) || !sameSummary {
			t.Errorf("CancelRun of %s run %s = %s finished %v summary %s; want it unchanged (%s, %v, %s)",
				before.Status, id, got.Status, got.FinishedAt, got.Summary, before.Status, before.FinishedAt, before.Summary)
		}
		q.wantStates("attempts of "+id, q.attempts(id), attempts...)
	}
	q.wantStates("the interrupted run", q.attempts(paused.ID), "p/0#1:pending")

	if _, err := q.b.CancelRun(ctx, q.uniq+"-nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CancelRun of an unknown run = %v, want ErrNotFound", err)
	}
	d := q.run("d1", store.RunInput{}, "x/0")
	q.run("d2", store.RunInput{}, "y/0")
	if _, err := q.b.CancelRun(ctx, q.uniq+"-d"); !errors.Is(err, store.ErrAmbiguous) {
		t.Errorf("CancelRun of a prefix of two runs = %v, want ErrAmbiguous", err)
	}
	q.wantStates("a run an ambiguous cancel named", q.attempts(d.ID), "x/0#1:pending")
	e := q.run("e-only", store.RunInput{}, "z/0")
	if got, err := q.b.CancelRun(ctx, q.uniq+"-e"); err != nil || got.ID != e.ID || got.Status != store.RunCancelled {
		t.Errorf("CancelRun of a unique prefix = %+v, %v; want run %s cancelled", got, err, e.ID)
	}
	q.wantStates("the run a unique prefix named", q.attempts(e.ID), "z/0#1:cancelled")
}

// queueCancelSummary: a cancelled run's summary (runqueue.Finalize over
// this backend) is cancelled and counts its cancelled trials as neither
// passed, failed nor errored: they are records of the run, not outcomes,
// and the scores are the means over the trials that finished before.
func queueCancelSummary(t *testing.T, q *queueSuite) {
	ctx := t.Context()
	evals := []spec.Evaluator{{Name: "exact-match"}}
	in := store.RunInput{Spec: &spec.Spec{Name: "summary", Evaluators: evals}}
	r := q.run("a", in, "hit/0", "miss/0", "broke/0", "busy/0", "wait/0")
	scored := func(v float64) store.Completion {
		c := queueFinished()
		c.Scores = []store.Score{{Name: "exact-match", Value: v}}
		c.Evaluations = json.RawMessage(fmt.Sprintf(`[{"evaluator": "exact-match", "scores": [{"name": "exact-match", "value": %v}]}]`, v))
		return c
	}
	q.complete(q.lease(store.LeaseRequest{}), scored(1))
	q.complete(q.lease(store.LeaseRequest{}), scored(0))
	q.complete(q.lease(store.LeaseRequest{}), store.Completion{Result: store.TrialResult{Status: store.TrialErrored, ErrorKind: "sandbox", Error: "bwrap died"}})
	q.lease(store.LeaseRequest{}) // busy/0: running when the run is cancelled
	if _, err := q.b.CancelRun(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	done, err := runqueue.Done(ctx, q.b, r.ID)
	if err != nil || !done {
		t.Fatalf("runqueue.Done of the cancelled run = %v, %v; want done (nothing is still running)", done, err)
	}
	sum, err := runqueue.Finalize(ctx, q.b, r.ID, runqueue.FinalizeOptions{Evaluators: evals})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Status != store.RunCancelled || sum.Records != 5 || sum.Trials != 1 || sum.Errored != 1 ||
		!reflect.DeepEqual(sum.ErrorsByKind, map[string]int{"sandbox": 1}) || sum.Attempts != 3 {
		t.Errorf("summary %+v; want cancelled, 5 records of 1 trial, 1 errored (sandbox), 3 attempts recorded", sum)
	}
	if m := sum.Scores["exact-match"]; math.Abs(m-0.5) > 1e-9 || sum.Aggregate.TrialsRun != 3 || sum.Aggregate.Errored != 1 {
		t.Errorf("exact-match mean %v over %d trials run, %d errored; want 0.5 over the 3 that ran, 1 errored", m, sum.Aggregate.TrialsRun, sum.Aggregate.Errored)
	}
	got, err := q.b.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var stored engine.Summary
	if got.Status != store.RunCancelled || json.Unmarshal(got.Summary, &stored) != nil || stored.Status != store.RunCancelled || stored.Errored != 1 {
		t.Errorf("the run after Finalize: %s, summary %s; want cancelled with the cancelled summary", got.Status, got.Summary)
	}
}

// queueCancelRaces: a cancel racing workers that lease, retry and finish
// attempts, and a sweeper taking leases back, still leaves no attempt of
// the run pending or running once they are done: whatever a racing write
// added (a retry's or a requeue's next attempt) is cancelled too, and
// nothing of the run is leased afterwards.
func queueCancelRaces(t *testing.T, q *queueSuite) {
	ctx := t.Context()
	var keys []string
	for i := range 40 {
		keys = append(keys, fmt.Sprintf("rec%02d/0", i))
	}
	r := q.run("a", store.RunInput{MaxRunning: 3}, keys...)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				l, err := q.b.Lease(ctx, store.LeaseRequest{Worker: fmt.Sprintf("w%d", w), TTL: time.Minute, Runs: []string{r.ID}})
				if errors.Is(err, store.ErrNoWork) {
					select {
					case <-stop:
						return
					default:
						time.Sleep(time.Millisecond)
						continue
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
				c := queueFinished()
				if i%2 == 0 {
					c = store.Completion{Retry: true, Result: store.TrialResult{Status: store.TrialErrored, ErrorKind: "sandbox"}}
				}
				if err := q.b.Complete(ctx, l, c); err != nil && !errors.Is(err, store.ErrLeaseLost) {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := q.b.Requeue(ctx, store.RequeueRequest{Expired: time.Now().Add(time.Hour), RunID: r.ID}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	time.Sleep(50 * time.Millisecond)
	if _, err := q.b.CancelRun(ctx, r.ID); err != nil {
		t.Error(err)
	}
	close(stop)
	wg.Wait()
	n, err := q.b.CountTrials(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n[store.TrialPending]+n[store.TrialRunning] != 0 || n[store.TrialCancelled] == 0 {
		t.Errorf("trials after a cancel among racing writers: %v; want none pending or running, some cancelled", n)
	}
	for _, tr := range q.attempts(r.ID) {
		if tr.Unfinished() {
			t.Errorf("attempt %s#%d is %s after the cancel", queueKey(tr.RecordID, tr.Trial), tr.Attempt, tr.Status)
		}
	}
	q.noWork(store.LeaseRequest{Runs: []string{r.ID}})
}
