package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBlobDedup(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	d1, err := s.PutBlob(ctx, []byte("same content"))
	if err != nil {
		t.Fatal(err)
	}
	d2, size, err := s.PutBlobReader(ctx, strings.NewReader("same content"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("same content"))
	want := "sha256:" + hex.EncodeToString(sum[:])
	if d1 != want || d2 != want || size != int64(len("same content")) {
		t.Fatalf("digests %s, %s (size %d); want %s", d1, d2, size, want)
	}
	other, err := s.PutBlob(ctx, []byte("other"))
	if err != nil {
		t.Fatal(err)
	}
	files := blobFiles(t, s)
	if len(files) != 2 {
		t.Errorf("blob files = %v, want 2 (one per distinct content)", files)
	}
	wantPath := filepath.Join(s.blobs, "sha256", want[7:9], want[7:])
	if _, err := os.Stat(wantPath); err != nil {
		t.Errorf("blob not at %s: %v", wantPath, err)
	}
	if tmp, _ := os.ReadDir(filepath.Join(s.blobs, "tmp")); len(tmp) != 0 {
		t.Errorf("temp files left behind: %v", tmp)
	}
	if b, err := s.GetBlob(ctx, other); err != nil || string(b) != "other" {
		t.Errorf("GetBlob = %q, %v", b, err)
	}
	if n, err := s.BlobSize(ctx, other); err != nil || n != 5 {
		t.Errorf("BlobSize = %d, %v", n, err)
	}
	empty, err := s.PutBlob(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := s.GetBlob(ctx, empty); err != nil || len(b) != 0 {
		t.Errorf("empty blob = %q, %v", b, err)
	}
}

func blobFiles(t *testing.T, s *Store) []string {
	t.Helper()
	var files []string
	if _, err := os.Stat(filepath.Join(s.blobs, "sha256")); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	err := filepath.WalkDir(filepath.Join(s.blobs, "sha256"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// patternReader yields n bytes of a repeating pattern without holding them.
type patternReader struct{ n, off int64 }

func (p *patternReader) Read(b []byte) (int, error) {
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

func TestBlobStreaming(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	const n = 64 << 20 // larger than anything worth holding in memory
	h := sha256.New()
	io.Copy(h, &patternReader{n: n})
	want := "sha256:" + hex.EncodeToString(h.Sum(nil))

	d, size, err := s.PutBlobReader(ctx, &patternReader{n: n})
	if err != nil {
		t.Fatal(err)
	}
	if d != want || size != n {
		t.Fatalf("PutBlobReader = %s, %d; want %s, %d", d, size, want, n)
	}
	rc, err := s.OpenBlob(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h.Reset()
	if m, err := io.Copy(h, rc); err != nil || m != n {
		t.Fatalf("reading back: %d bytes, %v", m, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want {
		t.Errorf("streamed content digest %s, want %s", got, want)
	}
}

func TestBlobErrors(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)

	t.Run("failing reader leaves nothing", func(t *testing.T) {
		r := io.MultiReader(strings.NewReader("partial"), errReader{})
		if _, _, err := s.PutBlobReader(ctx, r); err == nil {
			t.Fatal("PutBlobReader of a failing reader succeeded")
		}
		if files := blobFiles(t, s); len(files) != 0 {
			t.Errorf("blob files after a failed put: %v", files)
		}
		if tmp, _ := os.ReadDir(filepath.Join(s.blobs, "tmp")); len(tmp) != 0 {
			t.Errorf("temp files after a failed put: %v", tmp)
		}
	})

	t.Run("canceled context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.PutBlob(cctx, []byte("x")); !errors.Is(err, context.Canceled) {
			t.Errorf("PutBlob with a canceled context: %v", err)
		}
	})

	t.Run("corrupt blob is detected", func(t *testing.T) {
		d, err := s.PutBlob(ctx, []byte("original"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s.blobPath(d[7:]), []byte("tampered"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetBlob(ctx, d); err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("GetBlob of a corrupt blob: %v", err)
		}
	})

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
		t.Run("invalid digest "+bad, func(t *testing.T) {
			_, err := s.GetBlob(ctx, bad)
			if err == nil || !strings.Contains(err.Error(), "invalid blob digest") {
				t.Errorf("GetBlob(%q) err = %v, want invalid blob digest", bad, err)
			}
		})
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestPutBlobMatchesBytes(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	data := bytes.Repeat([]byte{0, 1, 2, 255}, 1000)
	d, err := s.PutBlob(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetBlob(ctx, d)
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("binary blob round trip failed: %v", err)
	}
}
