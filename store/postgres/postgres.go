// Package postgres is the store on PostgreSQL, for a server whose workers
// and API processes share one database: the same store.Backend as the
// embedded SQLite store (store.Open), checked against the same suite
// (storetest), with blobs kept by a store.Blobs of the caller's choosing
// (store.OpenFSBlobs for a directory).
//
// What differs from the SQLite store: times are kept to the microsecond
// (event times, which travel in the event's JSON, keep their nanoseconds);
// text PostgreSQL cannot hold (NUL bytes, invalid UTF-8) is stored with
// U+FFFD in their place, as Go's JSON encoder does, rather than refused, so
// an agent that prints a NUL never turns into an infrastructure error.
//
// Writes are ordinary transactions (PostgreSQL has many writers); the
// queue's claims use FOR UPDATE SKIP LOCKED so leasers never wait on each
// other, and every leaseholder write is fenced by the attempt's lease epoch
// in the same transaction.
package postgres

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"evals.si/store"
)

// Store is the PostgreSQL store. It is safe for concurrent use, and any
// number of processes may share one database.
type Store struct {
	pool  *pgxpool.Pool
	blobs store.Blobs
	// redact holds the secrets no stored text may contain.
	redact store.Redaction
}

var _ store.Backend = (*Store)(nil)

// Open connects to the database dsn names (a postgres:// URL or key=value
// DSN, as libpq takes them) and applies any pending migrations. Blobs
// (large payloads and outputs, artifacts) go to blobs.
func Open(ctx context.Context, dsn string, blobs store.Blobs) (*Store, error) {
	if blobs == nil {
		return nil, errors.New("opening the PostgreSQL store: no blob store given (store.OpenFSBlobs makes one)")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors can quote the DSN, password included.
		return nil, errors.New("opening the PostgreSQL store: the DSN does not parse (want postgres://user@host:port/db or key=value pairs)")
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening the PostgreSQL store %s: %w", where, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("opening the PostgreSQL store %s: connecting: %w", where, err)
	}
	s := &Store{pool: pool, blobs: blobs}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("opening the PostgreSQL store %s: %w", where, err)
	}
	return s, nil
}

// Close closes the connection pool. The blob store is the caller's.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// AddSecrets registers values that must never be stored (see
// store.Store.AddSecrets).
func (s *Store) AddSecrets(values ...string) { s.redact.AddSecrets(values...) }

// RedactJSON returns JSON as the store keeps it.
func (s *Store) RedactJSON(b []byte) []byte { return s.json(b) }

// text is a string as stored: redacted, and holdable by PostgreSQL.
func (s *Store) text(v string) string { return pgText(s.redact.Text(v)) }

// json is JSON as stored: redacted, and valid UTF-8 (a NUL inside valid JSON
// is always escaped, which the json type accepts).
func (s *Store) json(b []byte) []byte {
	b = s.redact.JSON(b)
	if !utf8.Valid(b) {
		b = bytes.ToValidUTF8(b, []byte("\uFFFD"))
	}
	return b
}

// pgText replaces what a PostgreSQL text value cannot hold.
func pgText(v string) string {
	if !utf8.ValidString(v) {
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	return strings.ReplaceAll(v, "\x00", "\uFFFD")
}

// nullJSON maps empty JSON to NULL and rejects invalid JSON, naming the
// field; the value is redacted.
func (s *Store) nullJSON(field string, b []byte) (any, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%s is not valid JSON", field)
	}
	return string(s.json(b)), nil
}

// Blobs: bytes go through the redactor on their way in.

// PutBlob stores data, redacted, and returns its digest.
func (s *Store) PutBlob(ctx context.Context, data []byte) (string, error) {
	d, _, err := s.PutBlobReader(ctx, bytes.NewReader(data))
	return d, err
}

// PutBlobReader streams r, redacted, into a blob.
func (s *Store) PutBlobReader(ctx context.Context, r io.Reader) (string, int64, error) {
	return s.blobs.PutBlobReader(ctx, s.redact.Reader(r))
}

func (s *Store) GetBlob(ctx context.Context, digest string) ([]byte, error) {
	return s.blobs.GetBlob(ctx, digest)
}

func (s *Store) OpenBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	return s.blobs.OpenBlob(ctx, digest)
}

func (s *Store) BlobSize(ctx context.Context, digest string) (int64, error) {
	return s.blobs.BlobSize(ctx, digest)
}

// querier is what both the pool and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// newID returns a sortable unique id, prefix-YYYYMMDD-HHMMSS-xxxxxx (UTC,
// six random hex digits), the SQLite store's form.
func newID(prefix string, now time.Time) string {
	var b [3]byte
	rand.Read(b[:])
	return prefix + "-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// validID is the SQLite store's rule for explicit run ids: 1 to 128 ASCII
// letters, digits, '.', '_' and '-', starting with a letter or digit.
func validID(id string) error {
	if len(id) > 128 {
		return fmt.Errorf("id %.20q… is longer than 128 characters", id)
	}
	for i, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return fmt.Errorf("id %q: use only letters, digits, '.', '_' and '-', starting with a letter or digit", id)
		}
	}
	return nil
}

func pgCode(err error) string {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func isUniqueViolation(err error) bool { return pgCode(err) == "23505" }
func isForeignKey(err error) bool      { return pgCode(err) == "23503" }

// lookupByPrefix resolves an exact id or a unique id prefix in table.
func lookupByPrefix(ctx context.Context, q querier, table, what, prefix string) (string, error) {
	if prefix == "" {
		return "", fmt.Errorf("looking up %s: empty id", what)
	}
	// Ids are printable ASCII; anything else names nothing (and a NUL would
	// not even reach the server).
	for i := 0; i < len(prefix); i++ {
		if prefix[i] < 0x20 || prefix[i] >= 0x7f {
			return "", fmt.Errorf("%s %q: %w", what, prefix, store.ErrNotFound)
		}
	}
	var id string
	err := q.QueryRow(ctx, "SELECT id FROM "+table+" WHERE id = $1", prefix).Scan(&id)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("looking up %s %s: %w", what, prefix, err)
	}
	// Under the "C" collation every id starting with prefix sorts in
	// [prefix, prefix+"\x7f"): a range of the primary key index.
	rows, err := q.Query(ctx,
		"SELECT id FROM "+table+" WHERE id >= $1 AND id < $2 AND starts_with(id, $1) ORDER BY id LIMIT 6",
		prefix, prefix+"\x7f")
	if err != nil {
		return "", fmt.Errorf("looking up %s %s: %w", what, prefix, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("looking up %s %s: %w", what, prefix, err)
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("%s %s: %w", what, prefix, store.ErrNotFound)
	case 1:
		return ids[0], nil
	default:
		more := ""
		if len(ids) > 5 {
			ids, more = ids[:5], ", …"
		}
		return "", fmt.Errorf("%s %q matches %s%s; give more of the id: %w", what, prefix, strings.Join(ids, ", "), more, store.ErrAmbiguous)
	}
}

// utc turns a nullable stored time into a time in UTC (zero for NULL).
func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// nullTime maps the zero time to NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}
