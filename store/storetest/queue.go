package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"evals.si/store"
	"evals.si/trajectory"
)

// Queue checks a Backend's trial queue against the contract in
// store/backend.go: lease order and filters, max_running, racing leasers,
// heartbeats, fencing of a lost lease, retries, MaxLost, requeue, enqueue
// idempotence, current attempts, atomic completions and cancelling a run
// (cancel.go). open returns a
// fresh, empty backend for each case; it is closed at cleanup.
func Queue(t *testing.T, open func(t *testing.T) store.Backend) {
	cases := []struct {
		name string
		run  func(t *testing.T, q *queueSuite)
	}{
		{"LeaseOrderAndFilters", queueLeaseOrderAndFilters},
		{"MaxRunning", queueMaxRunning},
		{"RacingLeasers", queueRacingLeasers},
		{"HeartbeatExtends", queueHeartbeatExtends},
		{"LostLeaseIsFenced", queueLostLeaseIsFenced},
		{"RetryMakesNextAttempt", queueRetryMakesNextAttempt},
		{"MaxLost", queueMaxLost},
		{"RequeueAllOfRun", queueRequeueAllOfRun},
		{"RequeueNeedsASelection", queueRequeueNeedsASelection},
		{"EnqueueIdempotent", queueEnqueueIdempotent},
		{"ListTrialsCurrentAttempts", queueListTrialsCurrentAttempts},
		{"CompleteIsAtomic", queueCompleteIsAtomic},
		{"CancelEndsUnfinishedAttempts", queueCancelEndsUnfinishedAttempts},
		{"CancelIsIdempotent", queueCancelIsIdempotent},
		{"CancelSummary", queueCancelSummary},
		{"CancelRaces", queueCancelRaces},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := open(t)
			t.Cleanup(func() { b.Close() })
			c.run(t, &queueSuite{t: t, b: b, uniq: fmt.Sprintf("q%x", time.Now().UnixNano())})
		})
	}
}

// queueSuite holds one case's backend and helpers that fail the test.
type queueSuite struct {
	t    *testing.T
	b    store.Backend
	uniq string // makes run ids unique should open share a database
}

// run creates a run (its id sorts by name, so runs created in name order
// are also in id order) and enqueues "record/trial" keys in that order.
func (q *queueSuite) run(name string, in store.RunInput, keys ...string) store.Run {
	q.t.Helper()
	in.ID = q.uniq + "-" + name
	r, err := q.b.CreateRun(q.t.Context(), in)
	if err != nil {
		q.t.Fatalf("CreateRun %s: %v", name, err)
	}
	q.enqueue(r.ID, keys...)
	return r
}

func (q *queueSuite) enqueue(runID string, keys ...string) {
	q.t.Helper()
	var ins []store.TrialInput
	for _, k := range keys {
		rec, trial := queueSplitKey(k)
		ins = append(ins, store.TrialInput{RunID: runID, RecordID: rec, Trial: trial,
			Record: json.RawMessage(fmt.Sprintf(`{"id": %q, "input": "task %s"}`, rec, k))})
	}
	if err := q.b.Enqueue(q.t.Context(), runID, ins); err != nil {
		q.t.Fatalf("Enqueue %v: %v", keys, err)
	}
}

func queueSplitKey(k string) (string, int) {
	rec, trial, _ := strings.Cut(k, "/")
	n := 0
	fmt.Sscan(trial, &n)
	return rec, n
}

func queueKey(recordID string, trial int) string { return fmt.Sprintf("%s/%d", recordID, trial) }

func (q *queueSuite) lease(req store.LeaseRequest) store.Lease {
	q.t.Helper()
	if req.TTL == 0 {
		req.TTL = time.Minute
	}
	if req.Worker == "" {
		req.Worker = "w1"
	}
	l, err := q.b.Lease(q.t.Context(), req)
	if err != nil {
		q.t.Fatalf("Lease(%+v): %v", req, err)
	}
	return l
}

func (q *queueSuite) noWork(req store.LeaseRequest) {
	q.t.Helper()
	req.TTL, req.Worker = time.Minute, "w1"
	if l, err := q.b.Lease(q.t.Context(), req); !errors.Is(err, store.ErrNoWork) {
		q.t.Fatalf("Lease(%+v) = %s, %v; want ErrNoWork", req, queueKey(l.RecordID, l.Trial), err)
	}
}

func (q *queueSuite) complete(l store.Lease, c store.Completion) {
	q.t.Helper()
	if err := q.b.Complete(q.t.Context(), l, c); err != nil {
		q.t.Fatalf("Complete %s: %v", l.TrialID, err)
	}
}

func queueFinished() store.Completion {
	pass := true
	return store.Completion{Result: store.TrialResult{Status: store.TrialFinished, Passed: &pass, Output: "done"}}
}

func (q *queueSuite) attempts(runID string) []store.Trial {
	q.t.Helper()
	ts, err := q.b.ListAttempts(q.t.Context(), runID)
	if err != nil {
		q.t.Fatalf("ListAttempts: %v", err)
	}
	return ts
}

func (q *queueSuite) current(runID string) []store.Trial {
	q.t.Helper()
	ts, err := q.b.ListTrials(q.t.Context(), runID)
	if err != nil {
		q.t.Fatalf("ListTrials: %v", err)
	}
	return ts
}

// queueStates renders attempts as "record/trial#attempt:status".
func queueStates(ts []store.Trial) []string {
	var out []string
	for _, t := range ts {
		out = append(out, fmt.Sprintf("%s#%d:%s", queueKey(t.RecordID, t.Trial), t.Attempt, t.Status))
	}
	return out
}

func (q *queueSuite) wantStates(what string, ts []store.Trial, want ...string) {
	q.t.Helper()
	if got := queueStates(ts); !reflect.DeepEqual(got, want) {
		q.t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// nothingStored checks that an attempt has no scores, evaluations or
// artifacts and events events.
func (q *queueSuite) nothingStored(runID, trialID string, events int) {
	q.t.Helper()
	ctx := q.t.Context()
	if sc, err := q.b.TrialScores(ctx, trialID); err != nil || len(sc) != 0 {
		q.t.Errorf("scores of %s = %v, %v; want none", trialID, sc, err)
	}
	if as, err := q.b.Artifacts(ctx, trialID); err != nil || len(as) != 0 {
		q.t.Errorf("artifacts of %s = %v, %v; want none", trialID, as, err)
	}
	if ev, err := q.b.Evaluations(ctx, runID); err != nil || ev[trialID] != nil {
		q.t.Errorf("evaluations of %s = %s, %v; want none", trialID, ev[trialID], err)
	}
	if n, err := q.b.CountEvents(ctx, trialID); err != nil || n != events {
		q.t.Errorf("events of %s = %d, %v; want %d", trialID, n, err, events)
	}
}

func queueSameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func queueLogs(texts ...string) []trajectory.Event {
	var evs []trajectory.Event
	for _, s := range texts {
		evs = append(evs, trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: s}})
	}
	return evs
}

// queueLeaseOrderAndFilters: leases come from the oldest running run first,
// in enqueue order (not record order) within it; Runs and Projects filter;
// runs not running are skipped until resumed; epochs increase.
func queueLeaseOrderAndFilters(t *testing.T, q *queueSuite) {
	ctx := t.Context()
	paused := q.run("a-paused", store.RunInput{Project: "p1"}, "old/0")
	if err := q.b.FinishRun(ctx, paused.ID, store.RunInterrupted, nil, ""); err != nil {
		t.Fatal(err)
	}
	a := q.run("b", store.RunInput{Project: "p1"}, "z/0", "a/1", "a/0")
	b := q.run("c", store.RunInput{Project: "p2"}, "x/0", "y/0")
	c := q.run("d", store.RunInput{Project: "p1"}, "c/0")

	steps := []struct {
		req  store.LeaseRequest
		want string // run/record/trial, "" for ErrNoWork
	}{
		{store.LeaseRequest{Runs: []string{b.ID}}, b.ID + "/x/0"},
		{store.LeaseRequest{Projects: []string{"p1"}}, a.ID + "/z/0"},
		{store.LeaseRequest{Projects: []string{"p2"}}, b.ID + "/y/0"},
		{store.LeaseRequest{Projects: []string{"p2"}}, ""},
		{store.LeaseRequest{Runs: []string{c.ID, b.ID}}, c.ID + "/c/0"},
		{store.LeaseRequest{Runs: []string{a.ID}, Projects: []string{"p2"}}, ""},
		{store.LeaseRequest{Projects: []string{"p3"}}, ""},
		{store.LeaseRequest{}, a.ID + "/a/1"},
		{store.LeaseRequest{Runs: []string{a.ID, paused.ID}}, a.ID + "/a/0"},
		{store.LeaseRequest{}, ""},
	}
	var last int64
	for i, s := range steps {
		if s.want == "" {
			q.noWork(s.req)
			continue
		}
		l := q.lease(s.req)
		if got := l.RunID + "/" + queueKey(l.RecordID, l.Trial); got != s.want {
			t.Fatalf("step %d: Lease(%+v) = %s, want %s", i, s.req, got, s.want)
		}
		if l.Attempt != 1 || l.Worker != "w1" || l.Epoch <= last || !queueSameJSON(l.Record, []byte(fmt.Sprintf(`{"id": %q, "input": "task %s"}`, l.RecordID, queueKey(l.RecordID, l.Trial)))) {
			t.Fatalf("step %d: lease %+v: want attempt 1 of worker w1, an epoch above %d and the enqueued record", i, l, last)
		}
		last = l.Epoch
	}
	if _, err := q.b.ResumeRun(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	if l := q.lease(store.LeaseRequest{}); l.RunID != paused.ID {
		t.Fatalf("after resume, Lease = run %s, want %s", l.RunID, paused.ID)
	}
	if _, err := q.b.Lease(ctx, store.LeaseRequest{Worker: "w1"}); err == nil || errors.Is(err, store.ErrNoWork) {
		t.Errorf("Lease without a TTL = %v; want an error other than ErrNoWork", err)
	}
}

// queueMaxRunning: a run at its MaxRunning is passed over (for a younger
// run) until one of its attempts ends.
func queueMaxRunning(t *testing.T, q *queueSuite) {
	capped := q.run("a", store.RunInput{MaxRunning: 2}, "r/0", "r/1", "r/2", "r/3")
	other := q.run("b", store.RunInput{}, "o/0")
	if r, err := q.b.GetRun(t.Context(), capped.ID); err != nil || r.MaxRunning != 2 {
		t.Fatalf("GetRun = %+v, %v; want MaxRunning 2", r, err)
	}
	first := q.lease(store.LeaseRequest{})
	q.lease(store.LeaseRequest{})
	q.noWork(store.LeaseRequest{Runs: []string{capped.ID}})
	if l := q.lease(store.LeaseRequest{}); l.RunID != other.ID {
		t.Fatalf("with the oldest run at its cap, Lease = run %s, want %s", l.RunID, other.ID)
	}
	q.complete(first, queueFinished())
	if l := q.lease(store.LeaseRequest{}); l.RunID != capped.ID || queueKey(l.RecordID, l.Trial) != "r/2" {
		t.Fatalf("after one attempt finished, Lease = %s %s, want %s r/2", l.RunID, queueKey(l.RecordID, l.Trial), capped.ID)
	}
	q.noWork(store.LeaseRequest{})
}

// queueRacingLeasers: leasers racing in goroutines never get the same
// attempt, and between them lease every trial once.
func queueRacingLeasers(t *testing.T, q *queueSuite) {
	const trials, workers = 60, 8
	var keys []string
	for i := range trials {
		keys = append(keys, fmt.Sprintf("rec%02d/0", i))
	}
	r := q.run("a", store.RunInput{}, keys...)
	var (
		mu     sync.Mutex
		got    = map[string]string{} // trial id -> worker
		epochs = map[int64]bool{}
		wg     sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			name := fmt.Sprintf("w%d", w)
			for {
				l, err := q.b.Lease(t.Context(), store.LeaseRequest{Worker: name, TTL: time.Minute})
				if errors.Is(err, store.ErrNoWork) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev, dup := got[l.TrialID]; dup {
					t.Errorf("attempt %s leased to %s and %s", l.TrialID, prev, name)
				}
				if epochs[l.Epoch] {
					t.Errorf("epoch %d handed out twice", l.Epoch)
				}
				got[l.TrialID], epochs[l.Epoch] = name, true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(got) != trials {
		t.Fatalf("%d attempts leased, want %d", len(got), trials)
	}
	for _, tr := range q.attempts(r.ID) {
		if tr.Status != store.TrialRunning || tr.LeaseOwner != got[tr.ID] || tr.Attempt != 1 {
			t.Errorf("attempt %s: %s by %q at attempt %d; want running by %q at attempt 1", tr.ID, tr.Status, tr.LeaseOwner, tr.Attempt, got[tr.ID])
		}
	}
}

// queueHeartbeatExtends: a heartbeat moves lease_until, and Requeue takes
// back only leases that ended before its Expired.
func queueHeartbeatExtends(t *testing.T, q *queueSuite) {
	ctx := t.Context()
	r := q.run("a", store.RunInput{}, "r/0")
	l := q.lease(store.LeaseRequest{TTL: time.Minute})
	until, err := q.b.Heartbeat(ctx, l, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if until.Before(l.Until.Add(time.Hour)) {
		t.Fatalf("Heartbeat(2h) = %v; the lease ended at %v", until, l.Until)
	}
	stored := q.attempts(r.ID)[0]
	if d := stored.LeaseUntil.Sub(until); d < -time.Millisecond || d > time.Millisecond || stored.LeaseEpoch != l.Epoch {
		t.Fatalf("stored lease until %v epoch %d; want %v epoch %d", stored.LeaseUntil, stored.LeaseEpoch, until, l.Epoch)
	}
	if back, err := q.b.Requeue(ctx, store.RequeueRequest{Expired: time.Now().Add(time.Hour)}); err != nil || len(back) != 0 {
		t.Fatalf("Requeue of leases ended an hour from now = %v, %v; want none (the heartbeat extended it)", queueStates(back), err)
	}
	back, err := q.b.Requeue(ctx, store.RequeueRequest{Expired: time.Now().Add(3 * time.Hour)})
	if err != nil || len(back) != 1 || back[0].ID != l.TrialID {
		t.Fatalf("Requeue of leases ended three hours from now = %v, %v; want the attempt", queueStates(back), err)
	}
}

// queueLostLeaseIsFenced: an expired lease is requeued as a new attempt;
// the old holder's AppendLeased, Heartbeat and Complete fail with
// ErrLeaseLost and write nothing, and so does a lease forged from the old
// epoch and the new attempt's id. A lease completes only once.
func queueLostLeaseIsFenced(t *testing.T, q *queueSuite) {
	ctx := t.Context()
	r := q.run("a", store.RunInput{}, "r/0")
	old := q.lease(store.LeaseRequest{Worker: "stalled-worker"})
	if err := q.b.AppendLeased(ctx, old, queueLogs("one", "two")); err != nil {
		t.Fatal(err)
	}
	back, err := q.b.Requeue(ctx, store.RequeueRequest{Expired: old.Until.Add(time.Second)})
	if err != nil || len(back) != 1 || back[0].ID != old.TrialID || back[0].Status != store.TrialLost {
		t.Fatalf("Requeue = %v, %v; want the attempt, lost", queueStates(back), err)
	}
	at := q.attempts(r.ID)
	q.wantStates("attempts after requeue", at, "r/0#1:lost", "r/0#2:pending")
	if at[0].ErrorKind != "lease" || !strings.Contains(at[0].Error, "stalled-worker") {
		t.Errorf("lost attempt error %s: %q; want kind lease naming the worker", at[0].ErrorKind, at[0].Error)
	}
	if !queueSameJSON(at[1].Record, at[0].Record) || at[1].RetriesUsed != 0 {
		t.Errorf("new attempt %+v: want the record carried and no retry counted", at[1])
	}

	full := queueFinished()
	full.Scores = []store.Score{{Name: "pass", Value: 1}}
	full.Evaluations = json.RawMessage(`[{"evaluator": "exact-match"}]`)
	full.Artifacts = []store.ArtifactInput{{Name: "diff.patch", MediaType: "text/x-diff", Data: []byte("+x")}}
	checkLost := func(what string, l store.Lease, events int) {
		t.Helper()
		if err := q.b.AppendLeased(ctx, l, queueLogs("late")); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("%s: AppendLeased = %v, want ErrLeaseLost", what, err)
		}
		if _, err := q.b.Heartbeat(ctx, l, time.Hour); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("%s: Heartbeat = %v, want ErrLeaseLost", what, err)
		}
		if err := q.b.Complete(ctx, l, full); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("%s: Complete = %v, want ErrLeaseLost", what, err)
		}
		q.nothingStored(r.ID, l.TrialID, events)
	}
	checkLost("the old holder", old, 2)
	q.wantStates("attempts after the old holder's writes", q.attempts(r.ID), "r/0#1:lost", "r/0#2:pending")

	cur := q.lease(store.LeaseRequest{Worker: "w2"})
	if cur.TrialID != at[1].ID || cur.Attempt != 2 || cur.Epoch <= old.Epoch {
		t.Fatalf("second lease %+v; want attempt 2 (%s) with an epoch above %d", cur, at[1].ID, old.Epoch)
	}
	forged := cur
	forged.Epoch = old.Epoch
	checkLost("a lease forged with the old epoch", forged, 0)

	if err := q.b.AppendLeased(ctx, cur, queueLogs("mine")); err != nil {
		t.Fatal(err)
	}
	q.complete(cur, full)
	again := queueFinished()
	again.Scores = []store.Score{{Name: "pass", Value: 0}}
	if err := q.b.Complete(ctx, cur, again); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("a second Complete = %v, want ErrLeaseLost", err)
	}
	if sc, err := q.b.TrialScores(ctx, cur.TrialID); err != nil || len(sc) != 1 || sc[0].Value != 1 {
		t.Errorf("scores after a second Complete = %v, %v; want the first completion's", sc, err)
	}
	q.wantStates("attempts at the end", q.attempts(r.ID), "r/0#1:lost", "r/0#2:finished")
}

// queueRetryMakesNextAttempt: Complete with Retry errors the attempt
// (without a verdict) and adds attempt+1, pending, with retries_used+1, the
// record and the spend carried; the next lease hands them out.
func queueRetryMakesNextAttempt(t *testing.T, q *queueSuite) {
	r := q.run("a", store.RunInput{}, "r/0")
	l := q.lease(store.LeaseRequest{})
	spend := trajectory.Usage{InputTokens: 100, OutputTokens: 20}
	pass := true // an errored attempt has no verdict, whatever the worker says
	q.complete(l, store.Completion{Retry: true, Result: store.TrialResult{Status: store.TrialErrored, Passed: &pass, ErrorKind: "sandbox",
		Error: "bwrap died", Usage: spend, CostUSD: 0.25, SpendUsage: spend, SpendCostUSD: 0.25}})
	at := q.attempts(r.ID)
	q.wantStates("attempts", at, "r/0#1:errored", "r/0#2:pending")
	next := at[1]
	if next.RetriesUsed != 1 || next.SpendUsage != spend || math.Abs(next.SpendCostUSD-0.25) > 1e-9 || !queueSameJSON(next.Record, at[0].Record) {
		t.Fatalf("next attempt %+v; want retries used 1, spend %+v / 0.25 and the record", next, spend)
	}
	if at[0].ErrorKind != "sandbox" || at[0].Error != "bwrap died" || at[0].Passed != nil {
		t.Errorf("errored attempt %s: %q, passed %v; want the error and no verdict", at[0].ErrorKind, at[0].Error, at[0].Passed)
	}
	l2 := q.lease(store.LeaseRequest{})
	if l2.TrialID != next.ID || l2.Attempt != 2 || l2.RetriesUsed != 1 || l2.SpendUsage != spend || math.Abs(l2.SpendCostUSD-0.25) > 1e-9 {
		t.Fatalf("lease of the retry %+v; want attempt 2, 1 retry used, spend carried", l2)
	}
	q.complete(l2, queueFinished())
	q.wantStates("current trials", q.current(r.ID), "r/0#2:finished")
}

// queueMaxLost: a trial may lose MaxLost attempts, each requeued; the
// next loss errors it with error kind "lease" instead, naming the worker,
// and nothing more is leased. Losses are not retries.
func queueMaxLost(t *testing.T, q *queueSuite) {
	ctx := t.Context()
	r := q.run("a", store.RunInput{}, "r/0")
	for i := range store.MaxLost + 1 {
		l := q.lease(store.LeaseRequest{Worker: fmt.Sprintf("dying-%d", i)})
		if l.Attempt != i+1 || l.RetriesUsed != 0 {
			t.Fatalf("lease %d: attempt %d, retries used %d; want attempt %d, none used", i, l.Attempt, l.RetriesUsed, i+1)
		}
		back, err := q.b.Requeue(ctx, store.RequeueRequest{Expired: time.Now().Add(time.Hour)})
		if err != nil || len(back) != 1 {
			t.Fatalf("Requeue %d = %v, %v", i, queueStates(back), err)
		}
	}
	at := q.attempts(r.ID)
	if len(at) != store.MaxLost+1 {
		t.Fatalf("%d attempts, want %d: %v", len(at), store.MaxLost+1, queueStates(at))
	}
	for _, a := range at[:store.MaxLost] {
		if a.Status != store.TrialLost {
			t.Errorf("attempt %d is %s, want lost", a.Attempt, a.Status)
		}
	}
	last := q.current(r.ID)
	if len(last) != 1 || last[0].Status != store.TrialErrored || last[0].ErrorKind != "lease" ||
		!strings.Contains(last[0].Error, fmt.Sprintf("dying-%d", store.MaxLost)) {
		t.Fatalf("trial after %d losses: %+v; want errored, kind lease, naming the last worker", store.MaxLost+1, last)
	}
	q.noWork(store.LeaseRequest{})
}

// queueRequeueAllOfRun: Requeue{RunID, All} takes back every running
// attempt of that run whatever its lease, and nothing of other runs;
// Requeue{RunID, Expired} only that run's expired ones.
func queueRequeueAllOfRun(t *testing.T, q *queueSuite) {
	ctx := t.Context()
	a := q.run("a", store.RunInput{}, "r/0", "r/1", "r/2")
	b := q.run("b", store.RunInput{}, "s/0")
	q.lease(store.LeaseRequest{Runs: []string{a.ID}, TTL: time.Hour})
	q.lease(store.LeaseRequest{Runs: []string{a.ID}, TTL: time.Hour})
	q.lease(store.LeaseRequest{Runs: []string{b.ID}, TTL: time.Hour})
	back, err := q.b.Requeue(ctx, store.RequeueRequest{RunID: b.ID, Expired: time.Now()})
	if err != nil || len(back) != 0 {
		t.Fatalf("Requeue of run b's expired leases = %v, %v; want none", queueStates(back), err)
	}
	back, err = q.b.Requeue(ctx, store.RequeueRequest{RunID: a.ID, All: true})
	if err != nil || len(back) != 2 {
		t.Fatalf("Requeue{RunID, All} = %v, %v; want both running attempts", queueStates(back), err)
	}
	q.wantStates("run a", q.attempts(a.ID), "r/0#1:lost", "r/0#2:pending", "r/1#1:lost", "r/1#2:pending", "r/2#1:pending")
	q.wantStates("run b", q.attempts(b.ID), "s/0#1:running")
	back, err = q.b.Requeue(ctx, store.RequeueRequest{RunID: b.ID, Expired: time.Now().Add(2 * time.Hour)})
	if err != nil || len(back) != 1 {
		t.Fatalf("Requeue of run b's leases ended two hours from now = %v, %v; want its attempt", queueStates(back), err)
	}
}

// queueRequeueNeedsASelection: a Requeue selecting nothing explicit is
// refused rather than taking back every lease.
func queueRequeueNeedsASelection(t *testing.T, q *queueSuite) {
	r := q.run("a", store.RunInput{}, "r/0")
	q.lease(store.LeaseRequest{})
	for _, req := range []store.RequeueRequest{{}, {All: true}, {RunID: r.ID}} {
		if back, err := q.b.Requeue(t.Context(), req); err == nil {
			t.Errorf("Requeue(%+v) = %v, nil; want an error", req, queueStates(back))
		}
	}
	q.wantStates("attempts", q.attempts(r.ID), "r/0#1:running")
}

// queueEnqueueIdempotent: enqueueing trials a run has (in one call or
// again later, whatever their state) leaves them as they are; new ones go
// to the end of the order; an unknown run is ErrNotFound.
func queueEnqueueIdempotent(t *testing.T, q *queueSuite) {
	r := q.run("a", store.RunInput{}, "a/0", "a/1", "b/0", "a/0")
	q.complete(q.lease(store.LeaseRequest{}), queueFinished())
	q.enqueue(r.ID, "a/1", "c/0", "a/0", "c/0")
	q.wantStates("attempts", q.attempts(r.ID), "a/0#1:finished", "a/1#1:pending", "b/0#1:pending", "c/0#1:pending")
	err := q.b.Enqueue(t.Context(), q.uniq+"-nope", []store.TrialInput{{RunID: q.uniq + "-nope", RecordID: "x"}})
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Enqueue into a missing run = %v, want ErrNotFound", err)
	}
}

// queueListTrialsCurrentAttempts: ListTrials and CountTrials see one
// attempt per trial, its highest; ListAttempts sees them all; Scores and
// Evaluations are keyed by attempt id.
func queueListTrialsCurrentAttempts(t *testing.T, q *queueSuite) {
	ctx := t.Context()
	r := q.run("a", store.RunInput{}, "a/0", "b/0", "c/0")
	la := q.lease(store.LeaseRequest{})
	q.complete(la, store.Completion{Retry: true, Result: store.TrialResult{Status: store.TrialErrored, ErrorKind: "sandbox", Error: "x"}})
	lb := q.lease(store.LeaseRequest{})
	if queueKey(lb.RecordID, lb.Trial) != "a/0" {
		t.Fatalf("after a retry the next lease is %s, want a/0 (the retry keeps its trial's place)", queueKey(lb.RecordID, lb.Trial))
	}
	c := queueFinished()
	c.Scores = []store.Score{{Name: "pass", Value: 1}}
	c.Evaluations = json.RawMessage(`[{"evaluator": "exact-match"}]`)
	q.complete(lb, c)
	q.lease(store.LeaseRequest{}) // b/0, left running
	if _, err := q.b.Requeue(ctx, store.RequeueRequest{RunID: r.ID, All: true}); err != nil {
		t.Fatal(err)
	}
	q.wantStates("ListTrials", q.current(r.ID), "a/0#2:finished", "b/0#2:pending", "c/0#1:pending")
	q.wantStates("ListAttempts", q.attempts(r.ID), "a/0#1:errored", "a/0#2:finished", "b/0#1:lost", "b/0#2:pending", "c/0#1:pending")
	n, err := q.b.CountTrials(ctx, r.ID)
	if want := map[string]int{store.TrialFinished: 1, store.TrialPending: 2}; err != nil || !reflect.DeepEqual(n, want) {
		t.Errorf("CountTrials = %v, %v; want %v", n, err, want)
	}
	if sc, err := q.b.Scores(ctx, r.ID); err != nil || len(sc) != 1 || len(sc[lb.TrialID]) != 1 {
		t.Errorf("Scores = %v, %v; want the finished attempt's, by its id", sc, err)
	}
	if ev, err := q.b.Evaluations(ctx, r.ID); err != nil || len(ev) != 1 || !queueSameJSON(ev[lb.TrialID], c.Evaluations) {
		t.Errorf("Evaluations = %v, %v; want the finished attempt's, by its id", ev, err)
	}
	if tr, err := q.b.GetTrial(ctx, lb.TrialID); err != nil || tr.Status != store.TrialFinished || tr.Attempt != 2 {
		t.Errorf("GetTrial(%s) = %+v, %v", lb.TrialID, tr, err)
	}
	if _, err := q.b.ListTrials(ctx, q.uniq+"-nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListTrials of a missing run = %v, want ErrNotFound", err)
	}
}

// queueCompleteIsAtomic: a completion that fails, before the transaction
// (invalid input) or inside it (a score or an artifact named twice, found
// by the insert after the result was written), stores nothing at all: the
// attempt is still running under its lease, with no result, scores,
// evaluations, artifacts or next attempt, and the events appended before
// stay. The lease then completes normally.
func queueCompleteIsAtomic(t *testing.T, q *queueSuite) {
	ctx := t.Context()
	r := q.run("a", store.RunInput{}, "r/0")
	l := q.lease(store.LeaseRequest{})
	if err := q.b.AppendLeased(ctx, l, queueLogs("one", "two", "three")); err != nil {
		t.Fatal(err)
	}
	good := func() store.Completion {
		c := queueFinished()
		c.Scores = []store.Score{{Name: "pass", Value: 1}, {Name: "cost", Value: 0.5, Details: json.RawMessage(`{"why": "cheap"}`)}}
		c.Evaluations = json.RawMessage(`[{"evaluator": "exact-match"}]`)
		c.Artifacts = []store.ArtifactInput{{Name: "diff.patch", MediaType: "text/x-diff", Data: []byte("+x")}, {Name: "log.txt", Data: []byte("log")}}
		return c
	}
	bad := []struct {
		name   string
		mutate func(c *store.Completion)
	}{
		{"score named twice", func(c *store.Completion) { c.Scores = append(c.Scores, store.Score{Name: "pass", Value: 0}) }},
		{"artifact named twice", func(c *store.Completion) {
			c.Artifacts = append(c.Artifacts, store.ArtifactInput{Name: "diff.patch", Data: []byte("-y")})
		}},
		{"NaN score", func(c *store.Completion) { c.Scores[1].Value = math.NaN() }},
		{"score without a name", func(c *store.Completion) { c.Scores[1].Name = "" }},
		{"artifact without a name", func(c *store.Completion) { c.Artifacts[1].Name = "" }},
		{"invalid evaluations", func(c *store.Completion) { c.Evaluations = json.RawMessage(`[{`) }},
		{"invalid score details", func(c *store.Completion) { c.Scores[1].Details = json.RawMessage(`{`) }},
		{"unknown status", func(c *store.Completion) { c.Result.Status = "done" }},
		{"retry of a finished attempt", func(c *store.Completion) { c.Retry = true }},
	}
	for _, b := range bad {
		c := good()
		b.mutate(&c)
		err := q.b.Complete(ctx, l, c)
		if err == nil || errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("%s: Complete = %v; want an error other than ErrLeaseLost", b.name, err)
		}
		at := q.attempts(r.ID)
		q.wantStates(b.name+": attempts", at, "r/0#1:running")
		if at[0].Output != "" || at[0].Passed != nil || at[0].LeaseEpoch != l.Epoch {
			t.Errorf("%s: attempt %+v; want no result, still under epoch %d", b.name, at[0], l.Epoch)
		}
		q.nothingStored(r.ID, l.TrialID, 3)
	}
	q.complete(l, good())
	at := q.attempts(r.ID)
	q.wantStates("attempts", at, "r/0#1:finished")
	if at[0].Output != "done" || at[0].Passed == nil || !*at[0].Passed {
		t.Errorf("finished attempt %+v", at[0])
	}
	if sc, err := q.b.TrialScores(ctx, l.TrialID); err != nil || len(sc) != 2 {
		t.Errorf("scores = %v, %v; want 2", sc, err)
	}
	if as, err := q.b.Artifacts(ctx, l.TrialID); err != nil || len(as) != 2 {
		t.Errorf("artifacts = %v, %v; want 2", as, err)
	} else if b, err := q.b.GetBlob(ctx, as[0].Digest); err != nil || string(b) != "+x" || as[0].Name != "diff.patch" || as[0].Size != 2 {
		t.Errorf("artifact %+v reads %q, %v", as[0], b, err)
	}
	if n, err := q.b.CountEvents(ctx, l.TrialID); err != nil || n != 3 {
		t.Errorf("events = %d, %v; want 3", n, err)
	}
}
