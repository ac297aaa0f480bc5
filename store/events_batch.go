package store

import (
	"context"
	"database/sql"
	"fmt"

	"evals.si/trajectory"
)

// AppendEvents appends events to a trial's trajectory in one transaction:
// all or none are durable when it returns. Rules per event are
// AppendEvent's; seqs given must not be taken yet, and zero seqs are
// numbered after the trial's last.
func (s *Store) AppendEvents(ctx context.Context, trialID string, evs []trajectory.Event) error {
	if len(evs) == 0 {
		return nil
	}
	rows, err := s.eventRows(ctx, trialID, evs)
	if err != nil {
		return err
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return s.insertEventRows(ctx, tx, trialID, rows)
	})
	if err != nil {
		return fmt.Errorf("appending %d events to trial %s: %w", len(evs), trialID, err)
	}
	return nil
}
