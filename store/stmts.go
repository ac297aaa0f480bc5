package store

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache keeps the statements a trial's writes run every time prepared:
// SQLite parses the text of every statement it is not handed prepared, and
// on a run of trivial trials the parsing was a quarter of the store's CPU.
// A statement is prepared on first use; database/sql then keeps one
// prepared copy per connection it ran on.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// in returns query prepared, bound to tx; on a failure to prepare, the
// statement is left to tx to prepare (and to report).
func (c *stmtCache) in(ctx context.Context, tx *sql.Tx, query string) *sql.Stmt {
	c.mu.Lock()
	st, ok := c.m[query]
	c.mu.Unlock()
	if !ok {
		// Outside the lock: preparing waits for a free connection.
		p, err := c.db.PrepareContext(ctx, query)
		if err != nil {
			return nil
		}
		c.mu.Lock()
		if st, ok = c.m[query]; ok {
			p.Close()
		} else {
			if c.m == nil {
				c.m = map[string]*sql.Stmt{}
			}
			c.m[query], st = p, p
		}
		c.mu.Unlock()
	}
	return tx.StmtContext(ctx, st)
}

func (c *stmtCache) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if st := c.in(ctx, tx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

func (c *stmtCache) queryRow(ctx context.Context, tx *sql.Tx, query string, args ...any) *sql.Row {
	if st := c.in(ctx, tx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, query, args...)
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = nil
}
