package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Blobs are content-addressed files. A digest is "sha256:" followed by 64
// lowercase hex digits; the blob lives at <dir>/sha256/<first two hex
// digits>/<hex>. Equal content is stored once. A blob is written to
// <dir>/tmp, synced, and renamed into place, so a blob that exists is always
// complete. The SQLite store keeps its blobs in <db dir>/blobs; a PostgreSQL
// store is given a Blobs, which may be an FSBlobs.

const digestPrefix = "sha256:"

// FSBlobs is a blob store in a directory of the local file system. It
// stores bytes as given: redacting them is the store's job (Store.PutBlob
// redacts, then calls FSBlobs). Safe for concurrent use, also by several
// processes sharing the directory.
type FSBlobs struct {
	dir string
}

// OpenFSBlobs opens (creating if needed) the blob directory dir.
func OpenFSBlobs(dir string) (*FSBlobs, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("opening blob directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Join(abs, "tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("opening blob directory %s: %w", abs, err)
	}
	return &FSBlobs{dir: abs}, nil
}

// Dir is the blob directory.
func (b *FSBlobs) Dir() string { return b.dir }

// fsBlobs is the SQLite store's blob directory (Open creates it).
func (s *Store) fsBlobs() *FSBlobs { return &FSBlobs{dir: s.blobs} }

// PutBlob stores data, redacted, and returns its digest.
func (s *Store) PutBlob(ctx context.Context, data []byte) (string, error) {
	d, _, err := s.PutBlobReader(ctx, bytes.NewReader(data))
	return d, err
}

// PutBlobReader streams r, redacted, into a blob in constant memory and
// returns its digest and size.
func (s *Store) PutBlobReader(ctx context.Context, r io.Reader) (digest string, size int64, err error) {
	return s.fsBlobs().PutBlobReader(ctx, s.redact.reader(r))
}

// GetBlob reads a whole blob and checks its content against the digest.
func (s *Store) GetBlob(ctx context.Context, digest string) ([]byte, error) {
	return s.fsBlobs().GetBlob(ctx, digest)
}

// OpenBlob opens a blob for streaming. A missing blob is ErrNotFound.
func (s *Store) OpenBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	return s.fsBlobs().OpenBlob(ctx, digest)
}

// BlobSize is a blob's size in bytes. A missing blob is ErrNotFound.
func (s *Store) BlobSize(ctx context.Context, digest string) (int64, error) {
	return s.fsBlobs().BlobSize(ctx, digest)
}

func (s *Store) blobPath(sum string) string { return s.fsBlobs().path(sum) }

// PutBlob stores data and returns its digest.
func (b *FSBlobs) PutBlob(ctx context.Context, data []byte) (string, error) {
	d, _, err := b.PutBlobReader(ctx, bytes.NewReader(data))
	return d, err
}

// PutBlobReader streams r into a blob in constant memory and returns its
// digest and size.
func (b *FSBlobs) PutBlobReader(ctx context.Context, r io.Reader) (digest string, size int64, err error) {
	tmp, err := os.CreateTemp(filepath.Join(b.dir, "tmp"), "blob-*")
	if err != nil {
		return "", 0, fmt.Errorf("storing blob: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	size, err = io.Copy(io.MultiWriter(tmp, h), ctxReader{ctx, r})
	if err != nil {
		return "", 0, fmt.Errorf("storing blob: writing %s: %w", tmp.Name(), err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	digest = digestPrefix + sum
	final := b.path(sum)
	if _, statErr := os.Stat(final); statErr == nil {
		// Already stored: content addressing makes the copies identical.
		tmp.Close()
		os.Remove(tmp.Name())
		return digest, size, nil
	}
	if err = tmp.Sync(); err != nil {
		return "", 0, fmt.Errorf("storing blob %s: syncing: %w", digest, err)
	}
	if err = tmp.Close(); err != nil {
		return "", 0, fmt.Errorf("storing blob %s: %w", digest, err)
	}
	dir := filepath.Dir(final)
	if err = os.MkdirAll(dir, 0o700); err != nil {
		return "", 0, fmt.Errorf("storing blob %s: %w", digest, err)
	}
	// Two writers of the same content both rename; either wins, and both
	// files are identical, so the race is harmless.
	if err = os.Rename(tmp.Name(), final); err != nil {
		return "", 0, fmt.Errorf("storing blob %s: %w", digest, err)
	}
	// The rename is durable only once the directory is synced; rows that
	// refer to the blob are committed after this returns.
	if err = syncDir(dir); err != nil {
		return "", 0, fmt.Errorf("storing blob %s: syncing %s: %w", digest, dir, err)
	}
	return digest, size, nil
}

// GetBlob reads a whole blob and checks its content against the digest.
func (b *FSBlobs) GetBlob(ctx context.Context, digest string) ([]byte, error) {
	rc, err := b.OpenBlob(ctx, digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(ctxReader{ctx, rc})
	if err != nil {
		return nil, fmt.Errorf("reading blob %s: %w", digest, err)
	}
	sum := sha256.Sum256(data)
	if digestPrefix+hex.EncodeToString(sum[:]) != digest {
		return nil, fmt.Errorf("reading blob %s: content does not match its digest; the file %s is corrupt", digest, b.path(digest[len(digestPrefix):]))
	}
	return data, nil
}

// OpenBlob opens a blob for streaming. A missing blob is ErrNotFound.
func (b *FSBlobs) OpenBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sum, err := parseDigest(digest)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(b.path(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("opening blob %s: %w", digest, err)
	}
	return f, nil
}

// BlobSize is a blob's size in bytes. A missing blob is ErrNotFound.
func (b *FSBlobs) BlobSize(ctx context.Context, digest string) (int64, error) {
	sum, err := parseDigest(digest)
	if err != nil {
		return 0, err
	}
	fi, err := os.Stat(b.path(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("blob %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("stat blob %s: %w", digest, err)
	}
	return fi.Size(), nil
}

// parseDigest checks a digest's form (so it can never name a path outside
// the blob directory) and returns its hex part.
func parseDigest(digest string) (string, error) {
	sum, ok := strings.CutPrefix(digest, digestPrefix)
	if !ok || len(sum) != 2*sha256.Size || strings.ToLower(sum) != sum {
		return "", fmt.Errorf("invalid blob digest %q: want sha256:<64 lowercase hex digits>", digest)
	}
	if _, err := hex.DecodeString(sum); err != nil {
		return "", fmt.Errorf("invalid blob digest %q: want sha256:<64 lowercase hex digits>", digest)
	}
	return sum, nil
}

func (b *FSBlobs) path(sum string) string {
	return filepath.Join(b.dir, "sha256", sum[:2], sum)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ctxReader stops a long copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
