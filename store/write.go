package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// writeReq is one write waiting to be committed.
type writeReq struct {
	ctx  context.Context
	fn   func(ctx context.Context, tx *sql.Tx) error
	done chan error // buffered; receives the write's outcome once
}

// write runs fn in a write transaction and returns once it is committed (or
// has failed). fn's effects are all-or-nothing. fn gets ctx without its
// cancellation: SQLite answers an interrupted INSERT/UPDATE/DELETE by rolling
// back the whole transaction, which would fail the other writes sharing it. A
// write whose ctx is already done when its turn comes is not run.
//
// Writes are group-committed: every caller queues its write, and whichever
// caller takes the writer slot runs all queued writes in one transaction,
// each inside a savepoint so a failing write is rolled back alone, then
// commits once and hands each caller its outcome. Under load one fsync thus
// serves many writes, and each write is still durable when write returns.
// There is no background goroutine: the leader is always a caller.
func (s *Store) write(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req := &writeReq{ctx: ctx, fn: fn, done: make(chan error, 1)}
	s.qmu.Lock()
	s.queue = append(s.queue, req)
	s.qmu.Unlock()

	// Not selecting on ctx.Done: once queued, a write may be committed by
	// another caller at any moment, and returning early would hide whether
	// it was. Waiting is bounded by one batch's execution.
	select {
	case err := <-req.done:
		return err
	case s.wsem <- struct{}{}:
	}
	defer func() { <-s.wsem }()
	// The previous leader may have committed our write before handing over
	// the slot (it answers every request before releasing it).
	select {
	case err := <-req.done:
		return err
	default:
	}
	s.qmu.Lock()
	batch := s.queue
	s.queue = nil
	s.qmu.Unlock()
	s.commit(batch)
	return <-req.done
}

// commit runs a batch of writes in one transaction and answers each.
func (s *Store) commit(batch []*writeReq) {
	answer := func(reqs []*writeReq, err error) {
		for _, r := range reqs {
			r.done <- err
		}
	}
	// The transaction must not die with any one caller's context.
	tx, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		answer(batch, fmt.Errorf("beginning transaction: %w", err))
		return
	}
	var ok []*writeReq // writes applied, answered after the commit
	for i, r := range batch {
		err := r.ctx.Err()
		if err == nil {
			err = s.applyInSavepoint(tx, r)
		}
		var fatal *txLostError
		if errors.As(err, &fatal) {
			// The whole transaction is gone: every write in it failed.
			tx.Rollback()
			answer(ok, fatal.err)
			answer(batch[i:], fatal.err)
			return
		}
		if err != nil {
			r.done <- err
			continue
		}
		ok = append(ok, r)
	}
	if err := tx.Commit(); err != nil {
		answer(ok, fmt.Errorf("committing: %w", err))
		return
	}
	answer(ok, nil)
}

// txLostError means the transaction itself failed, not just one write.
type txLostError struct{ err error }

func (e *txLostError) Error() string { return e.err.Error() }

func (s *Store) applyInSavepoint(tx *sql.Tx, r *writeReq) error {
	if _, err := s.stmts.exec(context.Background(), tx, "SAVEPOINT w"); err != nil {
		return &txLostError{fmt.Errorf("opening savepoint: %w", err)}
	}
	if ferr := r.fn(context.WithoutCancel(r.ctx), tx); ferr != nil {
		// SQLite rolls a whole transaction back on some errors (disk full,
		// I/O); then the savepoint is gone too, and so is the batch.
		if _, err := s.stmts.exec(context.Background(), tx, "ROLLBACK TO w"); err != nil {
			return &txLostError{fmt.Errorf("%w (rolling back: %v)", ferr, err)}
		}
		if _, err := s.stmts.exec(context.Background(), tx, "RELEASE w"); err != nil {
			return &txLostError{fmt.Errorf("%w (releasing savepoint: %v)", ferr, err)}
		}
		return ferr
	}
	if _, err := s.stmts.exec(context.Background(), tx, "RELEASE w"); err != nil {
		return &txLostError{fmt.Errorf("releasing savepoint: %w", err)}
	}
	return nil
}
