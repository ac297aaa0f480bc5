package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
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

type migration struct {
	version int
	name    string
	sql     string
}

// migrations lists the embedded migrations in version order.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("reading embedded migrations: %w", err)
	}
	var ms []migration
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
		b, err := migrationFS.ReadFile(path.Join("migrations", name))
		if err != nil {
			return nil, fmt.Errorf("reading embedded migration %s: %w", name, err)
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// migrate applies every migration not yet recorded in schema_version, all in
// one transaction under the advisory lock: a failing migration leaves the
// database as it was.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	latest := ms[len(ms)-1].version
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
			if m.version <= current {
				continue
			}
			// No arguments: pgx sends it over the simple protocol, which
			// runs a file of several statements.
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("applying migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO schema_version (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return fmt.Errorf("recording migration %s: %w", m.name, err)
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
