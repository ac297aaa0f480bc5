package image

import (
	"bytes"
	"compress/gzip"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/klauspost/compress/zstd"
)

// TestUnpackStaysInRoot runs hostile layers against a root next to a canary
// directory: each must either fail or land inside the root, and the canary
// must be untouched.
func TestUnpackStaysInRoot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		layers  [][]ent
		wantErr string
	}{
		{name: "dotdot file", layers: [][]ent{{file("../canary/pwned", "x", 0o644)}}, wantErr: "escapes"},
		{name: "dotdot inside", layers: [][]ent{{file("a/../../canary/pwned", "x", 0o644)}}, wantErr: "escapes"},
		{name: "absolute dotdot", layers: [][]ent{{file("/x/../../canary/pwned", "x", 0o644)}}, wantErr: "escapes"},
		{name: "hardlink out", layers: [][]ent{{hardlink("h", "../canary/secret")}}, wantErr: "escapes"},
		{name: "relative symlink parent", layers: [][]ent{{symlink("evil", "../../../../../../CANARY"), file("evil/pwned", "x", 0o644)}}},
		{name: "absolute symlink parent", layers: [][]ent{{symlink("evil", "CANARY"), file("evil/pwned", "x", 0o644)}}},
		{name: "symlink across layers", layers: [][]ent{{symlink("evil", "CANARY")}, {dir("evil/", 0o777), file("evil/pwned", "x", 0o644)}}},
		{name: "symlink chain", layers: [][]ent{{symlink("a", "b"), symlink("b", "../c"), symlink("c", "CANARY"), file("a/pwned", "x", 0o644)}}},
		{name: "whiteout through symlink", layers: [][]ent{{symlink("evil", "CANARY")}, {whiteout("evil/.wh.secret")}}},
		{name: "opaque through symlink", layers: [][]ent{{symlink("evil", "CANARY")}, {whiteout("evil/.wh..wh..opq")}}},
		{name: "hardlink through symlink", layers: [][]ent{{symlink("evil", "CANARY"), hardlink("h", "evil/secret")}}, wantErr: "hard link target"},
		{name: "file replaces symlink", layers: [][]ent{{symlink("s", "CANARY/secret")}, {file("s", "overwritten", 0o666)}}},
		{name: "dir replaces symlink", layers: [][]ent{{symlink("d", "CANARY")}, {dir("d/", 0o777)}}},
		{name: "symlink loop", layers: [][]ent{{symlink("l1", "l2"), symlink("l2", "l1"), file("l1/x", "x", 0o644)}}, wantErr: "too many levels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			canary := filepath.Join(base, "canary")
			root := filepath.Join(base, "root")
			os.Mkdir(canary, 0o700)
			os.Mkdir(root, 0o755)
			os.WriteFile(filepath.Join(canary, "secret"), []byte("secret"), 0o600)
			u := newUnpacker(root, slog.New(slog.DiscardHandler))
			var err error
			for i, l := range tc.layers {
				for j := range l {
					l[j].name = strings.ReplaceAll(l[j].name, "CANARY", canary)
					l[j].link = strings.ReplaceAll(l[j].link, "CANARY", canary)
				}
				if err = u.apply("layer"+string(rune('0'+i)), bytes.NewReader(tarBytes(t, l...))); err != nil {
					break
				}
			}
			if err == nil {
				err = u.finish()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
			ents, _ := os.ReadDir(canary)
			if len(ents) != 1 || ents[0].Name() != "secret" {
				t.Errorf("canary directory changed: %v", ents)
			}
			if b, _ := os.ReadFile(filepath.Join(canary, "secret")); string(b) != "secret" {
				t.Errorf("canary file changed: %q", b)
			}
			if fi, _ := os.Stat(canary); fi.Mode().Perm() != 0o700 {
				t.Errorf("canary mode changed: %v", fi.Mode())
			}
			if fi, _ := os.Stat(filepath.Join(canary, "secret")); fi.Mode().Perm() != 0o600 {
				t.Errorf("canary file mode changed: %v", fi.Mode())
			}
		})
	}
}

// TestTraversalLayerRejected checks that the store refuses the image and
// leaves nothing behind that looks like a root.
func TestTraversalLayerRejected(t *testing.T) {
	img, err := mutate.AppendLayers(empty.Image,
		layerOf(t, file("ok", "ok", 0o644)),
		layerOf(t, file("../../../../../../../tmp/evalsi-pwned", "x", 0o644)))
	if err != nil {
		t.Fatal(err)
	}
	dir := writeLayout(t, img, "bad")
	s, _ := openStore(t)
	_, err = s.Resolve(context.Background(), "oci-layout:"+dir+":bad")
	if err == nil || !strings.Contains(err.Error(), "escapes the image root") || !strings.Contains(err.Error(), "layer 2 of 2") {
		t.Fatalf("error %v", err)
	}
	for _, sub := range []string{"roots", "tmp"} {
		if ents, _ := os.ReadDir(filepath.Join(s.dir, sub)); len(ents) != 0 {
			t.Errorf("%s/ holds %d entries after a failed unpack", sub, len(ents))
		}
	}
	if _, err := os.Stat("/tmp/evalsi-pwned"); err == nil {
		t.Errorf("/tmp/evalsi-pwned was written")
	}
}

func TestDecompressFormats(t *testing.T) {
	raw := tarBytes(t, file("a", "b", 0o644))
	var gz, zs bytes.Buffer
	gw := gzip.NewWriter(&gz)
	gw.Write(raw)
	gw.Close()
	zw, _ := zstd.NewWriter(&zs)
	zw.Write(raw)
	zw.Close()
	for name, blob := range map[string][]byte{"plain": raw, "gzip": gz.Bytes(), "zstd": zs.Bytes()} {
		rc, err := decompress(bytes.NewReader(blob))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		root := t.TempDir()
		u := newUnpacker(root, slog.New(slog.DiscardHandler))
		if err := u.apply(name, rc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "b" {
			t.Errorf("%s: a = %q", name, b)
		}
	}
}
