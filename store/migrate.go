package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// migrationFS holds the schema as numbered files, NNNN_name.sql, applied in
// order. A migration, once released, is never edited: changes go in a new file.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one embedded schema migration, NNNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// migrations lists the embedded migrations in version order.
func migrations() ([]Migration, error) { return ReadMigrations(migrationFS, "migrations") }

// ReadMigrations lists the migrations NNNN_name.sql in dir of fsys, in
// version order (each store backend embeds its own).
func ReadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("reading embedded migrations: %w", err)
	}
	var ms []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("embedded migration %s: name must be NNNN_name.sql", name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("embedded migrations %s and %s share version %d", prev, name, v)
		}
		seen[v] = name
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("reading embedded migration %s: %w", name, err)
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// migrate applies every migration not yet recorded in schema_migrations,
// each in its own write transaction. Several processes opening the same new
// database at once is fine: the write lock orders them, and each re-reads the
// applied versions inside its transaction.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    INTEGER PRIMARY KEY,
			name       TEXT NOT NULL,
			applied_at TEXT NOT NULL
		) STRICT`)
		return err
	})
	if err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	latest := ms[len(ms)-1].Version
	for _, m := range ms {
		write := s.write
		if strings.HasPrefix(m.SQL, foreignKeysOff) {
			write = s.writeWithoutForeignKeys
		}
		err := write(ctx, func(ctx context.Context, tx *sql.Tx) error {
			var maxV sql.NullInt64
			if err := tx.QueryRowContext(ctx, "SELECT max(version) FROM schema_migrations").Scan(&maxV); err != nil {
				return err
			}
			if maxV.Int64 > int64(latest) {
				return fmt.Errorf("the database is at schema version %d, newer than this evalsi knows (%d): upgrade evalsi", maxV.Int64, latest)
			}
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations WHERE version = ?", m.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
				m.Version, m.Name, formatTime(time.Now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("applying migration %s: %w", m.Name, err)
		}
	}
	return nil
}

// SchemaVersion is the highest migration applied to the database.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v sql.NullInt64
	if err := s.db.QueryRowContext(ctx, "SELECT max(version) FROM schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	return int(v.Int64), nil
}

// foreignKeysOff starts a migration that rebuilds a table other tables
// reference (SQLite's twelve-step ALTER TABLE procedure): with foreign keys
// enforced, dropping the old table would cascade-delete the referencing
// rows, and PRAGMA foreign_keys cannot change inside a transaction.
const foreignKeysOff = "-- evalsi:foreign-keys-off\n"

// writeWithoutForeignKeys runs fn in a transaction on one connection with
// foreign key enforcement off, and commits only when PRAGMA
// foreign_key_check finds nothing dangling. It holds the writer slot, so no
// group-committed write runs meanwhile, and turns enforcement back on before
// the connection returns to the pool (or discards the connection).
func (s *Store) writeWithoutForeignKeys(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	select {
	case s.wsem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.wsem }()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		return fmt.Errorf("turning foreign keys off: %w", err)
	}
	defer func() {
		if _, ferr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA foreign_keys = ON"); ferr != nil {
			// Never pool a connection that does not enforce foreign keys.
			conn.Raw(func(any) error { return driver.ErrBadConn })
			if err == nil {
				err = fmt.Errorf("turning foreign keys back on: %w", ferr)
			}
		}
	}()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return fmt.Errorf("checking foreign keys: %w", err)
	}
	dangling := rows.Next()
	rows.Close()
	if dangling {
		return errors.New("checking foreign keys: rows reference missing parents; the database is left as it was")
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("checking foreign keys: %w", err)
	}
	return tx.Commit()
}
