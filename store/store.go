// Package store is the embedded store of runs, trials, trajectory events,
// scores and artifact blobs: one SQLite database (pure-Go driver, no cgo) with
// content-addressed blobs on disk beside it.
//
// Layout on disk, for a database at <dir>/evalsi.db:
//
//	<dir>/evalsi.db                  the database (WAL mode, plus -wal and -shm files)
//	<dir>/blobs/sha256/ab/abcdef…    blobs, named by the hex SHA-256 of their content
//	<dir>/blobs/tmp/                 blobs being written (renamed into place when complete)
//
// Every write is committed and durable when the call returns
// (synchronous=FULL), so a process that dies mid-run leaves every event it
// appended readable; resume picks up from there. SQLite has one writer: writes
// within the process are group-committed (writes that queue up while a commit
// is in flight share the next transaction, each in its own savepoint, so one
// fsync serves many), and writers in other processes are waited for up to a
// busy timeout. Any number of goroutines may share one *Store.
//
// Trials: a trial (one trial index of one record) has one row per attempt,
// pending, running, finished (Passed holds the checker's verdict when there
// is one), errored (an infrastructure error prevented a verdict; errors are
// never scores), lost (its lease ran out and a new attempt took its
// place) or cancelled (its run was cancelled before it finished; neither a
// result nor an error). Workers lease attempts through the Queue
// (queue.go, backend.go), under a fencing epoch every leaseholder write is
// checked against.
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNotFound is returned (wrapped) when a run, trial or blob does not exist.
var ErrNotFound = errors.New("not found")

// ErrAmbiguous is returned (wrapped) when an id prefix matches more than one
// run or trial.
var ErrAmbiguous = errors.New("ambiguous id prefix")

// InlineLimit is the largest event payload (its JSON encoding) and trial
// output, in bytes, kept inline in the database. Larger ones are moved to a
// blob automatically and read back transparently.
const InlineLimit = 64 << 10

// busyTimeout is how long a write waits for another process's writer before
// failing with SQLITE_BUSY.
const busyTimeout = 30 * time.Second

// timeLayout is RFC 3339 in UTC with a fixed nine-digit fraction, so stored
// times sort correctly as text.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

// Store is the embedded store. It is safe for concurrent use.
type Store struct {
	db    *sql.DB
	path  string
	blobs string // <dir>/blobs
	// wsem is held by the one goroutine committing writes (see write.go).
	wsem chan struct{}
	// qmu guards queue, the writes waiting for the next commit.
	qmu   sync.Mutex
	queue []*writeReq
	// redact holds the secrets no stored text may contain (redact.go).
	redact redactor
	// stmts are the hot writes' statements, prepared once (stmts.go).
	stmts stmtCache
}

// DefaultPath is where the embedded store lives by default:
// $XDG_DATA_HOME/evalsi/evalsi.db, else ~/.local/share/evalsi/evalsi.db.
func DefaultPath() (string, error) {
	// The XDG spec says a relative XDG_DATA_HOME is invalid and is ignored.
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "evalsi", "evalsi.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the store's default location: %w (set XDG_DATA_HOME or pass a path)", err)
	}
	return filepath.Join(home, ".local", "share", "evalsi", "evalsi.db"), nil
}

// Open opens (creating if needed) the store at path and applies any pending
// migrations. An empty path means DefaultPath.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		p, err := DefaultPath()
		if err != nil {
			return nil, err
		}
		path = p
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	dir := filepath.Dir(abs)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("opening store %s: creating its directory: %w", abs, err)
	}

	db, err := sql.Open("sqlite", dsn(abs))
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", abs, err)
	}
	// Readers run in parallel under WAL; writers are serialized by wsem, so
	// one connection more than the readers we expect is plenty.
	n := max(4, 2*runtime.NumCPU())
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)

	s := &Store{db: db, path: abs, blobs: filepath.Join(dir, "blobs"), wsem: make(chan struct{}, 1), stmts: stmtCache{db: db}}
	if err := s.initRetrying(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", abs, err)
	}
	return s, nil
}

// initRetrying runs init, retrying while it fails with SQLITE_BUSY: two
// processes opening a new store at once race to switch it to WAL and to
// migrate, and SQLite answers some of those steps (the journal-mode change,
// WAL recovery) with SQLITE_BUSY at once instead of calling the busy
// handler. The retries are bounded by the busy timeout and honour ctx.
func (s *Store) initRetrying(ctx context.Context) error {
	deadline := time.Now().Add(busyTimeout)
	wait := 10 * time.Millisecond
	for {
		err := s.init(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after SQLITE_BUSY: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// isBusy reports whether err is SQLITE_BUSY or one of its extended codes.
func isBusy(err error) bool { return sqliteCode(err)&0xff == sqlite3.SQLITE_BUSY }

// dsn builds the driver's data source name. Pragmas are applied to every new
// connection of the pool; _txlock=immediate makes every transaction take the
// write lock at BEGIN, so a transaction never fails midway upgrading a read
// lock to a write lock (which SQLite refuses immediately, busy timeout or not).
func dsn(abs string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	// The path goes through SQLite's URI parser, which percent-decodes it;
	// escaping keeps '?', '#' and '%' in directory names intact.
	u := url.URL{Path: abs}
	return "file:" + u.EscapedPath() + "?" + q.Encode()
}

func (s *Store) init(ctx context.Context) error {
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("reading journal mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, want wal: the file system may not support SQLite's WAL (network file systems do not); put the store on a local disk", mode)
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.blobs, "tmp"), 0o700); err != nil {
		return fmt.Errorf("creating blob directory: %w", err)
	}
	return nil
}

// Path is the database file's absolute path.
func (s *Store) Path() string { return s.path }

// Close closes the database. Blobs need no closing.
func (s *Store) Close() error {
	s.stmts.close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("closing store %s: %w", s.path, err)
	}
	return nil
}

// querier is what both *sql.DB and *sql.Tx offer, so lookups can run inside
// or outside a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// newID returns a sortable unique id: prefix-YYYYMMDD-HHMMSS-xxxxxx (UTC,
// six random hex digits), e.g. r-20261129-085301-ab12cd.
func newID(prefix string, now time.Time) string {
	var b [3]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return prefix + "-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return formatTime(t)
}

func parseTime(s sql.NullString) (time.Time, error) {
	if !s.Valid || s.String == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s.String)
	if err != nil {
		return time.Time{}, fmt.Errorf("parsing stored time %q: %w", s.String, err)
	}
	return t, nil
}

// nullJSON maps empty JSON to NULL and rejects invalid JSON, naming the field.
func nullJSON(field string, b []byte) (any, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%s is not valid JSON", field)
	}
	return string(b), nil
}

func rawJSON(s sql.NullString) []byte {
	if !s.Valid {
		return nil
	}
	return []byte(s.String)
}

// sqliteCode is the extended SQLite result code of err, or 0.
func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

func isForeignKey(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY }

func isUniqueViolation(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

// lookupByPrefix resolves an exact id or a unique id prefix in table.
func lookupByPrefix(ctx context.Context, q querier, table, what, prefix string) (string, error) {
	if prefix == "" {
		return "", fmt.Errorf("looking up %s: empty id", what)
	}
	var id string
	err := q.QueryRowContext(ctx, "SELECT id FROM "+table+" WHERE id = ?", prefix).Scan(&id)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("looking up %s %s: %w", what, prefix, err)
	}
	// ids are ASCII; every string starting with prefix sorts in
	// [prefix, prefix+"\x7f"), which lets SQLite use the primary key index.
	rows, err := q.QueryContext(ctx,
		"SELECT id FROM "+table+" WHERE id >= ?1 AND id < ?2 AND substr(id, 1, length(?1)) = ?1 ORDER BY id LIMIT 6",
		prefix, prefix+"\x7f")
	if err != nil {
		return "", fmt.Errorf("looking up %s %s: %w", what, prefix, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return "", fmt.Errorf("looking up %s %s: %w", what, prefix, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("looking up %s %s: %w", what, prefix, err)
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("%s %s: %w", what, prefix, ErrNotFound)
	case 1:
		return ids[0], nil
	default:
		more := ""
		if len(ids) > 5 {
			ids, more = ids[:5], ", …"
		}
		return "", fmt.Errorf("%s %q matches %s%s; give more of the id: %w", what, prefix, strings.Join(ids, ", "), more, ErrAmbiguous)
	}
}
