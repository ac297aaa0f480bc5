package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"evals.si/store"
)

// migrationFS holds the schema as numbered files, NNNN_name.sql, applied in
// order. A migration, once released, is never edited: changes go in a new
// file.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLock is the advisory lock key migrations hold ("evalsi" in
// ASCII): servers starting at once on a new database take turns, and all
// but the first find nothing left to do.
const migrationLock = 0x6576616c7369

// migrations lists the embedded migrations in version order.
func migrations() ([]store.Migration, error) { return store.ReadMigrations(migrationFS, "migrations") }

// migrate applies every migration not yet recorded in schema_version, all in
// one transaction under the advisory lock: a failing migration leaves the
// database as it was.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	latest := ms[len(ms)-1].Version
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLock)); err != nil {
			return fmt.Errorf("taking the migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return fmt.Errorf("creating schema_version: %w", err)
		}
		var current int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_version").Scan(&current); err != nil {
			return fmt.Errorf("reading the schema version: %w", err)
		}
		if current > latest {
			return fmt.Errorf("the database is at schema version %d, newer than this evalsi knows (%d): upgrade evalsi", current, latest)
		}
		for _, m := range ms {
			if m.Version <= current {
				continue
			}
			// No arguments: pgx sends it over the simple protocol, which
			// runs a file of several statements.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("applying migration %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO schema_version (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return fmt.Errorf("recording migration %s: %w", m.Name, err)
			}
		}
		return nil
	})
}

// SchemaVersion is the highest migration applied to the database.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	if err := s.pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	return v, nil
}
