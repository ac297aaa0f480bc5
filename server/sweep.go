package server

import (
	"context"
	"time"

	"evals.si/store"
)

// Sweep requeues attempts whose lease ran out (their worker died, stalled
// or lost its connection) every interval, and finalizes runs whose trials
// are all done but whose end was never recorded (the server restarted
// between a trial's finish and the run's). It returns when ctx ends.
func (s *Server) Sweep(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = max(s.o.LeaseTTL/3, time.Second)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.SweepOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SweepOnce is one pass of Sweep.
func (s *Server) SweepOnce(ctx context.Context) {
	taken, err := s.o.Store.Requeue(ctx, store.RequeueRequest{Expired: s.o.Now()})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("requeuing expired leases", "err", err)
		}
		return
	}
	for _, t := range taken {
		s.log.Warn("lease expired; the trial is queued again", "run", t.RunID, "record", t.RecordID, "trial", t.Trial, "attempt", t.Attempt, "worker", t.LeaseOwner)
	}
	runs, err := s.o.Store.ListRuns(ctx, store.ListRunsOptions{Status: store.RunRunning})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("listing running runs", "err", err)
		}
		return
	}
	for _, r := range runs {
		s.finalizeIfDone(ctx, r.ID)
	}
}
