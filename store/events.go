package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"evals.si/trajectory"
)

// AppendEvent appends one event to a trial's trajectory; it is durable when
// AppendEvent returns. A zero Seq is assigned the next number (seqs start at
// 1); a non-zero Seq must not be taken yet. A zero Time is set to now. An
// event whose JSON is larger than InlineLimit is kept in a blob.
func (s *Store) AppendEvent(ctx context.Context, trialID string, e trajectory.Event) error {
	if e.Kind == "" {
		return fmt.Errorf("appending event to trial %s: the event has no kind", trialID)
	}
	if e.Seq < 0 {
		return fmt.Errorf("appending event to trial %s: negative seq %d", trialID, e.Seq)
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	// The payload is the whole event; seq, kind and time are also columns,
	// and the columns win when reading back, so the seq assigned below need
	// not be in the JSON.
	payload, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("appending %s event to trial %s: encoding it: %w", e.Kind, trialID, err)
	}
	payload = s.redact.json(payload)
	var inline, blob any = string(payload), nil
	if len(payload) > InlineLimit {
		d, err := s.PutBlob(ctx, payload)
		if err != nil {
			return fmt.Errorf("appending %s event to trial %s: storing its payload: %w", e.Kind, trialID, err)
		}
		inline, blob = nil, d
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		seq := e.Seq
		if seq == 0 {
			if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(seq), 0) + 1 FROM events WHERE trial_id = ?", trialID).Scan(&seq); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO events (trial_id, seq, kind, time, payload, payload_blob) VALUES (?, ?, ?, ?, ?, ?)",
			trialID, seq, string(e.Kind), formatTime(e.Time), inline, blob)
		switch {
		case isForeignKey(err):
			return fmt.Errorf("trial %s: %w", trialID, ErrNotFound)
		case isUniqueViolation(err):
			return fmt.Errorf("seq %d is already recorded", seq)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("appending %s event to trial %s: %w", e.Kind, trialID, err)
	}
	return nil
}

// Sink returns a trajectory.Sink that appends to the trial's events.
func (s *Store) Sink(ctx context.Context, trialID string) trajectory.Sink {
	return trajectory.SinkFunc(func(e trajectory.Event) error { return s.AppendEvent(ctx, trialID, e) })
}

// Events returns a trial's events with seq greater than afterSeq, in seq
// order, at most limit of them (limit <= 0: all). Paging: pass the last seq
// seen as afterSeq. A trial that does not exist has no events.
func (s *Store) Events(ctx context.Context, trialID string, afterSeq, limit int) ([]trajectory.Event, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.db.QueryContext(ctx, "SELECT seq, kind, time, payload, payload_blob FROM events WHERE trial_id = ? AND seq > ? ORDER BY seq LIMIT ?",
		trialID, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("reading events of trial %s: %w", trialID, err)
	}
	type row struct {
		seq           int
		kind, at      string
		payload, blob sql.NullString
	}
	var rs []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.seq, &r.kind, &r.at, &r.payload, &r.blob); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading events of trial %s: %w", trialID, err)
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading events of trial %s: %w", trialID, err)
	}
	events := make([]trajectory.Event, 0, len(rs))
	for _, r := range rs {
		payload := []byte(r.payload.String)
		if r.blob.Valid {
			if payload, err = s.GetBlob(ctx, r.blob.String); err != nil {
				return nil, fmt.Errorf("reading event %d of trial %s: %w", r.seq, trialID, err)
			}
		}
		var e trajectory.Event
		if err := json.Unmarshal(payload, &e); err != nil {
			return nil, fmt.Errorf("decoding event %d of trial %s: %w", r.seq, trialID, err)
		}
		e.Seq, e.Kind = r.seq, trajectory.Kind(r.kind)
		if e.Time, err = parseTime(sql.NullString{String: r.at, Valid: true}); err != nil {
			return nil, fmt.Errorf("decoding event %d of trial %s: %w", r.seq, trialID, err)
		}
		events = append(events, e)
	}
	return events, nil
}

// CountEvents is the number of events a trial has.
func (s *Store) CountEvents(ctx context.Context, trialID string) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM events WHERE trial_id = ?", trialID).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting events of trial %s: %w", trialID, err)
	}
	return n, nil
}
