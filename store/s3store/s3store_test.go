package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"evals.si/internal/testenv/pgtest"
	"evals.si/internal/testenv/s3test"
	"evals.si/store"
	"evals.si/store/postgres"
	"evals.si/store/storetest"
)

// These tests run against a real S3 server (versitygw on loopback, its
// posix backend in the test's directory) and, for the backend suite, a
// real PostgreSQL.

func TestMain(m *testing.M) { pgtest.Main(m) }

// open returns blobs under a prefix of a fresh server.
func open(t *testing.T, partSize int64) (*Blobs, *s3test.Server) {
	t.Helper()
	srv := s3test.Start(t)
	c, err := NewClient(Config{Endpoint: srv.Endpoint, Region: s3test.Region, PathStyle: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), c, Options{Bucket: srv.Bucket, Prefix: "evalsi/blobs", PartSize: partSize, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return b, srv
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestBackendSuite runs the suite every store.Backend passes on a
// PostgreSQL store whose blobs are in S3: large event payloads, outputs
// and artifacts go to the bucket, redacted, and read back.
func TestBackendSuite(t *testing.T) {
	b, _ := open(t, 0)
	storetest.Run(t, func(t *testing.T) store.Backend {
		st, err := postgres.Open(t.Context(), pgtest.Start(t), b)
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

// TestLayoutAndDedup: a blob is one object at <prefix>sha256/<2>/<hex>,
// equal content is stored once, sizes and empty blobs are right, and the
// spool directory is left empty.
func TestLayoutAndDedup(t *testing.T) {
	ctx := t.Context()
	b, srv := open(t, 0)
	d1, err := b.PutBlob(ctx, []byte("same content"))
	if err != nil {
		t.Fatal(err)
	}
	d2, n, err := b.PutBlobReader(ctx, strings.NewReader("same content"))
	if err != nil || d2 != d1 || n != 12 || d1 != digestOf([]byte("same content")) {
		t.Fatalf("PutBlobReader = %s, %d, %v; want %s, 12", d2, n, err, d1)
	}
	empty, err := b.PutBlob(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.GetBlob(ctx, empty); err != nil || len(got) != 0 {
		t.Errorf("empty blob = %q, %v", got, err)
	}
	want := []string{"evalsi/blobs/sha256/" + d1[7:9] + "/" + d1[7:], "evalsi/blobs/sha256/" + empty[7:9] + "/" + empty[7:]}
	slices.Sort(want)
	if keys := srv.Keys(t, ""); !slices.Equal(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	if left, _ := os.ReadDir(b.tmp); len(left) != 0 {
		t.Errorf("spool files left behind: %v", left)
	}
	if n, err := b.BlobSize(ctx, d1); err != nil || n != 12 {
		t.Errorf("BlobSize = %d, %v", n, err)
	}
}

// pattern yields n bytes of a repeating pattern without holding them.
type pattern struct{ n, off int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	if rest := p.n - p.off; int64(len(b)) > rest {
		b = b[:rest]
	}
	for i := range b {
		b[i] = byte((p.off + int64(i)) % 251)
	}
	p.off += int64(len(b))
	return len(b), nil
}

// TestMultipart: a blob over one part is uploaded in parts (the last one
// short), streams back whole, and leaves no upload open.
func TestMultipart(t *testing.T) {
	ctx := t.Context()
	b, _ := open(t, minPartSize)
	const n = 2*minPartSize + 12345
	h := sha256.New()
	io.Copy(h, &pattern{n: n})
	want := "sha256:" + hex.EncodeToString(h.Sum(nil))
	d, size, err := b.PutBlobReader(ctx, &pattern{n: n})
	if err != nil || d != want || size != n {
		t.Fatalf("PutBlobReader = %s, %d, %v; want %s, %d", d, size, err, want, n)
	}
	rc, err := b.OpenBlob(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h.Reset()
	if m, err := io.Copy(h, rc); err != nil || m != n || "sha256:"+hex.EncodeToString(h.Sum(nil)) != want {
		t.Fatalf("streaming back: %d bytes, %v", m, err)
	}
	if n, err := b.BlobSize(ctx, d); err != nil || n != size {
		t.Errorf("BlobSize = %d, %v", n, err)
	}
	noUploads(t, b)
}

func noUploads(t *testing.T, b *Blobs) {
	t.Helper()
	ups, err := b.c.ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(b.bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Errorf("multipart uploads left open: %v", ups.Uploads)
	}
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

// TestNothingPartialIsStored: a reader failing midway, bytes that do not
// match the checksum sent with them, and a multipart upload whose body
// comes short all fail and leave no object and no open upload.
func TestNothingPartialIsStored(t *testing.T) {
	ctx := t.Context()
	b, srv := open(t, minPartSize)
	if _, _, err := b.PutBlobReader(ctx, io.MultiReader(&pattern{n: 3 * minPartSize}, failing{})); err == nil {
		t.Fatal("PutBlobReader of a failing reader succeeded")
	}
	spool := func(data []byte) *os.File {
		f, err := os.Create(filepath.Join(t.TempDir(), "spool"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		f.Write(data)
		return f
	}
	other := sha256.Sum256([]byte("other content"))
	if err := b.putOne(ctx, b.key(strings.Repeat("ab", 32)), spool([]byte("content")), 7, other[:]); err == nil || !strings.Contains(err.Error(), "BadDigest") {
		t.Errorf("a PUT whose bytes do not match its SHA-256 checksum: %v, want the server to refuse it (BadDigest)", err)
	}
	// The spool file is shorter than the size the upload declares.
	short := spool(bytes.Repeat([]byte("x"), minPartSize+100))
	if err := b.putParts(ctx, b.key(strings.Repeat("cd", 32)), short, 2*minPartSize+100); err == nil {
		t.Error("a multipart upload with a short part was stored")
	}
	if keys := srv.Keys(t, ""); len(keys) != 0 {
		t.Errorf("objects after failed uploads: %v", keys)
	}
	noUploads(t, b)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.PutBlob(cctx, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("PutBlob with a canceled context: %v", err)
	}
}

// TestNotFoundAndCorrupt: an absent blob is store.ErrNotFound from every
// read; an object changed in the bucket is reported corrupt, by GetBlob
// and at the end of an OpenBlob stream; malformed digests are refused.
func TestNotFoundAndCorrupt(t *testing.T) {
	ctx := t.Context()
	b, srv := open(t, 0)
	absent := digestOf([]byte("never stored"))
	if _, err := b.GetBlob(ctx, absent); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetBlob of an absent blob: %v", err)
	}
	if _, err := b.OpenBlob(ctx, absent); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("OpenBlob of an absent blob: %v", err)
	}
	if _, err := b.BlobSize(ctx, absent); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BlobSize of an absent blob: %v", err)
	}

	d, err := b.PutBlob(ctx, []byte("original"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(t, b.key(d[7:]), []byte("tampered"))
	if _, err := b.GetBlob(ctx, d); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("GetBlob of a tampered object: %v", err)
	}
	rc, err := b.OpenBlob(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, rc); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("streaming a tampered object: %v", err)
	}
	rc.Close()

	for _, bad := range []string{"", "sha256:", "md5:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("A", 64),
		"sha256:../../../../etc/passwd", "sha256:" + strings.Repeat("a", 62) + "/."} {
		if _, err := b.GetBlob(ctx, bad); err == nil || !strings.Contains(err.Error(), "invalid blob digest") {
			t.Errorf("GetBlob(%q) err = %v, want invalid blob digest", bad, err)
		}
		if _, err := b.BlobSize(ctx, bad); err == nil || !strings.Contains(err.Error(), "invalid blob digest") {
			t.Errorf("BlobSize(%q) err = %v, want invalid blob digest", bad, err)
		}
	}
}

// TestOpenRefuses: a missing bucket, wrong credentials and a prefix with
// dot segments are refused when the store is opened, not at first use.
func TestOpenRefuses(t *testing.T) {
	srv := s3test.Start(t)
	good := Config{Endpoint: srv.Endpoint, Region: s3test.Region, PathStyle: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	bad := good
	bad.SecretKey = "wrong-secret"
	tests := []struct {
		name string
		cfg  Config
		o    Options
	}{
		{"missing bucket", good, Options{Bucket: "no-such-bucket"}},
		{"wrong secret", bad, Options{Bucket: srv.Bucket}},
		{"dot prefix", good, Options{Bucket: srv.Bucket, Prefix: "a/../b"}},
		{"empty segment", good, Options{Bucket: srv.Bucket, Prefix: "a//b"}},
		{"tiny parts", good, Options{Bucket: srv.Bucket, PartSize: 1 << 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClient(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Open(t.Context(), c, tt.o); err == nil {
				t.Fatal("Open succeeded")
			}
		})
	}
	for _, c := range []Config{{Region: "r", AccessKey: "a"}, {AccessKey: "a", SecretKey: "s"}, {Endpoint: "ftp://x", Region: "r", AccessKey: "a", SecretKey: "s"}} {
		if _, err := NewClient(c); err == nil {
			t.Errorf("NewClient(%+v) succeeded", c)
		}
	}
}
