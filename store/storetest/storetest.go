// Package storetest is the suite every store.Backend must pass: the SQLite
// store (store.Open) and the PostgreSQL store (store/postgres) run it, so
// both keep one contract. What only one backend has (SQLite's WAL, group
// commit and file; PostgreSQL's migration lock) is tested beside it.
package storetest

import (
	"fmt"
	"testing"
	"time"

	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// Run checks a Backend: runs, events, results, blobs, redaction, text a
// backend cannot hold, and the queue (Queue). open returns a fresh, empty
// backend for each case; it is closed at cleanup.
func Run(t *testing.T, open func(t *testing.T) store.Backend) {
	cases := []struct {
		name string
		run  func(t *testing.T, s *suite)
	}{
		{"CreateRun", runsCreate},
		{"GetRunByPrefix", runsGetByPrefix},
		{"ListRuns", runsList},
		{"FinishAndResumeRun", runsFinishAndResume},
		{"NotFound", notFound},
		{"EnqueueMany", enqueueMany},
		{"EventsRoundTrip", eventsRoundTrip},
		{"EventSeqAndPaging", eventsSeqAndPaging},
		{"LargeEventPayloadGoesToBlob", eventsLargePayload},
		{"AppendEventsBatch", eventsBatch},
		{"ConcurrentAppends", eventsConcurrent},
		{"CanceledAppendIsNotApplied", eventsCanceled},
		{"Scores", resultsScores},
		{"Evaluations", resultsEvaluations},
		{"Artifacts", resultsArtifacts},
		{"TrialRoundTrip", resultsTrialRoundTrip},
		{"Blobs", blobsRoundTrip},
		{"BlobErrors", blobsErrors},
		{"SecretsNeverReadBack", redactionEverywhere},
		{"TextAnyBytes", textAnyBytes},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := open(t)
			t.Cleanup(func() { b.Close() })
			c.run(t, &suite{t: t, b: b})
		})
	}
	t.Run("Queue", func(t *testing.T) { Queue(t, open) })
}

// suite holds one case's backend and helpers that fail the test.
type suite struct {
	t *testing.T
	b store.Backend
}

// trial creates a run and leases one attempt of it: the suite's way to an
// attempt to write to.
func (s *suite) trial() (store.Run, store.Lease) {
	s.t.Helper()
	ctx := s.t.Context()
	r, err := s.b.CreateRun(ctx, store.RunInput{Spec: &spec.Spec{Name: "test"}})
	if err != nil {
		s.t.Fatalf("CreateRun: %v", err)
	}
	return r, s.leaseIn(r.ID, "rec-1")
}

// leaseIn enqueues a record (trial 0) in a run and leases it.
func (s *suite) leaseIn(runID, recordID string) store.Lease {
	s.t.Helper()
	ctx := s.t.Context()
	if err := s.b.Enqueue(ctx, runID, []store.TrialInput{{RecordID: recordID}}); err != nil {
		s.t.Fatalf("Enqueue: %v", err)
	}
	l, err := s.b.Lease(ctx, store.LeaseRequest{Worker: "w", TTL: time.Hour, Runs: []string{runID}})
	if err != nil {
		s.t.Fatalf("Lease: %v", err)
	}
	if l.RecordID != recordID {
		s.t.Fatalf("leased record %q, want %q", l.RecordID, recordID)
	}
	return l
}

func logEv(text string) trajectory.Event {
	return trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: text}}
}

func seqs(es []trajectory.Event) []int {
	var out []int
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func (s *suite) events(trialID string) []trajectory.Event {
	s.t.Helper()
	es, err := s.b.Events(s.t.Context(), trialID, 0, 0)
	if err != nil {
		s.t.Fatalf("Events(%s): %v", trialID, err)
	}
	return es
}

func (s *suite) must(what string, err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

func ids(rs []store.Run) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func isUTC(ts ...time.Time) error {
	for i, t := range ts {
		if !t.IsZero() && t.Location() != time.UTC {
			return fmt.Errorf("time %d (%s) is not in UTC", i, t)
		}
	}
	return nil
}
