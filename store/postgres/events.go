package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"evals.si/store"
	"evals.si/trajectory"
)

// AppendEvent appends one event to an attempt's trajectory, durable when it
// returns. A zero Seq is assigned the next number (seqs start at 1); a
// non-zero Seq must not be taken yet. A zero Time is set to now. An event
// whose JSON is larger than store.InlineLimit is kept in a blob.
func (s *Store) AppendEvent(ctx context.Context, trialID string, e trajectory.Event) error {
	if err := s.appendEvents(ctx, trialID, []trajectory.Event{e}, nil); err != nil {
		return fmt.Errorf("appending %s event to trial %s: %w", e.Kind, trialID, err)
	}
	return nil
}

// AppendEvents appends events in one transaction: all or none are kept.
func (s *Store) AppendEvents(ctx context.Context, trialID string, evs []trajectory.Event) error {
	if err := s.appendEvents(ctx, trialID, evs, nil); err != nil {
		return fmt.Errorf("appending %d events to trial %s: %w", len(evs), trialID, err)
	}
	return nil
}

// AppendLeased appends events to the leased attempt, only while the lease
// holds: the fence is checked, and the row locked against Requeue, in the
// transaction that inserts them.
func (s *Store) AppendLeased(ctx context.Context, l store.Lease, evs []trajectory.Event) error {
	if err := s.appendEvents(ctx, l.TrialID, evs, &l); err != nil {
		return fmt.Errorf("appending %d events to trial %s (lease epoch %d): %w", len(evs), l.TrialID, l.Epoch, err)
	}
	return nil
}

type eventRow struct {
	seq    int
	kind   string
	time   time.Time
	inline any
	blob   any
}

func (s *Store) appendEvents(ctx context.Context, trialID string, evs []trajectory.Event, fence *store.Lease) error {
	if len(evs) == 0 {
		return nil // as the SQLite store: nothing to write, nothing checked
	}
	rows := make([]eventRow, len(evs))
	for i, e := range evs {
		if e.Kind == "" {
			return fmt.Errorf("event %d has no kind", i)
		}
		if e.Seq < 0 {
			return fmt.Errorf("negative seq %d", e.Seq)
		}
		if e.Time.IsZero() {
			e.Time = time.Now()
		}
		e.Time = e.Time.UTC()
		// The payload is the whole event; seq and kind are also columns and
		// win when reading back, so an assigned seq need not be in it. Its
		// time is exact to the nanosecond, the column's to the microsecond.
		payload, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encoding the %s event: %w", e.Kind, err)
		}
		payload = s.json(payload)
		r := eventRow{seq: e.Seq, kind: pgText(string(e.Kind)), time: e.Time, inline: string(payload)}
		if len(payload) > store.InlineLimit {
			d, err := s.PutBlob(ctx, payload)
			if err != nil {
				return fmt.Errorf("storing the %s event's payload: %w", e.Kind, err)
			}
			r.inline, r.blob = nil, d
		}
		rows[i] = r
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The row lock orders appenders of one attempt (seq numbering) and
		// holds off a Requeue or Complete until the events are in.
		if err := s.lockTrial(ctx, tx, trialID, fence); err != nil {
			return err
		}
		next := 0
		for _, r := range rows {
			seq := r.seq
			if seq == 0 {
				if next == 0 {
					if err := tx.QueryRow(ctx, "SELECT coalesce(max(seq), 0) + 1 FROM events WHERE trial_id = $1", trialID).Scan(&next); err != nil {
						return err
					}
				}
				seq = next
			}
			next = max(next, seq+1)
			_, err := tx.Exec(ctx, "INSERT INTO events (trial_id, seq, kind, time, payload, payload_blob) VALUES ($1, $2, $3, $4, $5, $6)",
				trialID, seq, r.kind, r.time, r.inline, r.blob)
			switch {
			case isUniqueViolation(err):
				return fmt.Errorf("seq %d is already recorded", seq)
			case err != nil:
				return err
			}
		}
		return nil
	})
}

// lockTrial locks an attempt's row for the transaction. With a fence, the
// attempt must be running under the lease's epoch, else ErrLeaseLost.
func (s *Store) lockTrial(ctx context.Context, tx pgx.Tx, trialID string, fence *store.Lease) error {
	var one int
	var err error
	if fence == nil {
		err = tx.QueryRow(ctx, "SELECT 1 FROM trials WHERE id = $1 FOR NO KEY UPDATE", pgText(trialID)).Scan(&one)
	} else {
		err = tx.QueryRow(ctx, "SELECT 1 FROM trials WHERE id = $1 AND lease_epoch = $2 AND status = 'running' FOR NO KEY UPDATE",
			pgText(trialID), fence.Epoch).Scan(&one)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows) && fence != nil:
		return s.leaseLost(ctx, tx, *fence)
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("trial %s: %w", trialID, store.ErrNotFound)
	}
	return err
}

// Events returns an attempt's events with seq greater than afterSeq, in seq
// order, at most limit of them (limit <= 0: all).
func (s *Store) Events(ctx context.Context, trialID string, afterSeq, limit int) ([]trajectory.Event, error) {
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	rows, err := s.pool.Query(ctx, "SELECT seq, kind, payload, payload_blob FROM events WHERE trial_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
		pgText(trialID), afterSeq, lim)
	if err != nil {
		return nil, fmt.Errorf("reading events of trial %s: %w", trialID, err)
	}
	type row struct {
		seq     int
		kind    string
		payload []byte
		blob    *string
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.seq, &x.kind, &x.payload, &x.blob)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading events of trial %s: %w", trialID, err)
	}
	events := make([]trajectory.Event, 0, len(rs))
	for _, r := range rs {
		payload := r.payload
		if r.blob != nil {
			if payload, err = s.GetBlob(ctx, *r.blob); err != nil {
				return nil, fmt.Errorf("reading event %d of trial %s: %w", r.seq, trialID, err)
			}
		}
		var e trajectory.Event
		if err := json.Unmarshal(payload, &e); err != nil {
			return nil, fmt.Errorf("decoding event %d of trial %s: %w", r.seq, trialID, err)
		}
		e.Seq, e.Kind, e.Time = r.seq, trajectory.Kind(r.kind), e.Time.UTC()
		events = append(events, e)
	}
	return events, nil
}

// CountEvents is the number of events an attempt has.
func (s *Store) CountEvents(ctx context.Context, trialID string) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE trial_id = $1", pgText(trialID)).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting events of trial %s: %w", trialID, err)
	}
	return n, nil
}
