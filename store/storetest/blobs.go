package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"evals.si/store"
)

// blobsRoundTrip: digests are sha256 of the content, equal content is one
// blob, sizes are right, empty and binary blobs round-trip, a large blob
// streams in and out.
func blobsRoundTrip(t *testing.T, s *suite) {
	ctx := t.Context()
	d1, err := s.b.PutBlob(ctx, []byte("same content"))
	if err != nil {
		t.Fatal(err)
	}
	d2, size, err := s.b.PutBlobReader(ctx, strings.NewReader("same content"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("same content"))
	want := "sha256:" + hex.EncodeToString(sum[:])
	if d1 != want || d2 != want || size != int64(len("same content")) {
		t.Fatalf("digests %s, %s (size %d); want %s", d1, d2, size, want)
	}
	if n, err := s.b.BlobSize(ctx, want); err != nil || n != 12 {
		t.Errorf("BlobSize = %d, %v", n, err)
	}
	empty, err := s.b.PutBlob(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := s.b.GetBlob(ctx, empty); err != nil || len(b) != 0 {
		t.Errorf("empty blob = %q, %v", b, err)
	}
	bin := bytes.Repeat([]byte{0, 1, 2, 255}, 1000)
	d, err := s.b.PutBlob(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.b.GetBlob(ctx, d); err != nil || !bytes.Equal(got, bin) {
		t.Errorf("binary blob round trip failed: %v", err)
	}

	const n = 8 << 20
	h := sha256.New()
	io.Copy(h, &pattern{n: n})
	wantBig := "sha256:" + hex.EncodeToString(h.Sum(nil))
	dBig, sizeBig, err := s.b.PutBlobReader(ctx, &pattern{n: n})
	if err != nil || dBig != wantBig || sizeBig != n {
		t.Fatalf("PutBlobReader = %s, %d, %v; want %s, %d", dBig, sizeBig, err, wantBig, n)
	}
	rc, err := s.b.OpenBlob(ctx, dBig)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h.Reset()
	if m, err := io.Copy(h, rc); err != nil || m != n || "sha256:"+hex.EncodeToString(h.Sum(nil)) != wantBig {
		t.Errorf("streaming back: %d bytes, %v", m, err)
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

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

// blobsErrors: a failing reader stores nothing, a canceled context is
// honoured, malformed digests (path tricks included) are refused.
func blobsErrors(t *testing.T, s *suite) {
	ctx := t.Context()
	partial := "partial content"
	if _, _, err := s.b.PutBlobReader(ctx, io.MultiReader(strings.NewReader(partial), failing{})); err == nil {
		t.Fatal("PutBlobReader of a failing reader succeeded")
	}
	sum := sha256.Sum256([]byte(partial))
	if _, err := s.b.BlobSize(ctx, "sha256:"+hex.EncodeToString(sum[:])); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after a failed put, the partial content is a blob: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.b.PutBlob(cctx, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("PutBlob with a canceled context: %v", err)
	}
	for _, bad := range []string{
		"",
		"sha256:",
		"md5:" + strings.Repeat("a", 64),
		"sha256:" + strings.Repeat("A", 64),
		"sha256:" + strings.Repeat("g", 64),
		"sha256:" + strings.Repeat("a", 63),
		"sha256:../../../../etc/passwd",
		"sha256:" + strings.Repeat("a", 62) + "/.",
	} {
		if _, err := s.b.GetBlob(ctx, bad); err == nil || !strings.Contains(err.Error(), "invalid blob digest") {
			t.Errorf("GetBlob(%q) err = %v, want invalid blob digest", bad, err)
		}
		if _, err := s.b.OpenBlob(ctx, bad); err == nil {
			t.Errorf("OpenBlob(%q) succeeded", bad)
		}
	}
}
