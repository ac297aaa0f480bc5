package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

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
	type row struct {
		seq          int
		kind, time   string
		inline, blob any
	}
	rows := make([]row, len(evs))
	for i, e := range evs {
		if e.Kind == "" {
			return fmt.Errorf("appending events to trial %s: event %d has no kind", trialID, i)
		}
		if e.Seq < 0 {
			return fmt.Errorf("appending events to trial %s: negative seq %d", trialID, e.Seq)
		}
		if e.Time.IsZero() {
			e.Time = time.Now()
		}
		e.Time = e.Time.UTC()
		payload, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("appending %s event to trial %s: encoding it: %w", e.Kind, trialID, err)
		}
		payload = s.redact.json(payload)
		r := row{seq: e.Seq, kind: string(e.Kind), time: formatTime(e.Time), inline: string(payload)}
		if len(payload) > InlineLimit {
			d, err := s.PutBlob(ctx, payload)
			if err != nil {
				return fmt.Errorf("appending %s event to trial %s: storing its payload: %w", e.Kind, trialID, err)
			}
			r.inline, r.blob = nil, d
		}
		rows[i] = r
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		next := 0
		for _, r := range rows {
			seq := r.seq
			if seq == 0 {
				if next == 0 {
					if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(seq), 0) + 1 FROM events WHERE trial_id = ?", trialID).Scan(&next); err != nil {
						return err
					}
				}
				seq = next
			}
			next = max(next, seq+1)
			_, err := tx.ExecContext(ctx, "INSERT INTO events (trial_id, seq, kind, time, payload, payload_blob) VALUES (?, ?, ?, ?, ?, ?)",
				trialID, seq, r.kind, r.time, r.inline, r.blob)
			switch {
			case isForeignKey(err):
				return fmt.Errorf("trial %s: %w", trialID, ErrNotFound)
			case isUniqueViolation(err):
				return fmt.Errorf("seq %d is already recorded", seq)
			case err != nil:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("appending %d events to trial %s: %w", len(evs), trialID, err)
	}
	return nil
}
