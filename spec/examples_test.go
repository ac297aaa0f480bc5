package spec

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every run spec shipped in examples/ (not only spec/testdata) loads and validates, so an example a
// reader copies never starts with a spec error. Files without a top-level
// dataset are model-server scripts, not run specs.
func TestShippedExamplesLoadAndValidate(t *testing.T) {
	root := filepath.Join("..", "examples")
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.HasPrefix(data, []byte("dataset:")) && !bytes.Contains(data, []byte("\ndataset:")) {
			return nil
		}
		n++
		f, err := Load(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		if err := f.Validate(); err != nil {
			t.Errorf("%s: %v", p, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("found %d run specs under %s; the walk is broken", n, root)
	}
}
