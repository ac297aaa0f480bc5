package swebench

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"evals.si/internal/testenv/swebenchref"
)

// TestPatchFilesMatchUnidiff: the files the eval-script builders read from
// a patch (get_modified_files, and PatchSet's paths for calypso) are
// unidiff's, and a patch unidiff refuses is refused, for patches of every
// shape its parser tells apart.
func TestPatchFilesMatchUnidiff(t *testing.T) {
	hunk := "@@ -1 +1 @@\n-a\n+b\n"
	patches := []string{
		richTestPatch,
		"",
		"not a patch at all\n",
		// git headers: plain, quoted, without prefixes, URI-like, mnemonic prefixes
		"diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n" + hunk,
		"diff --git \"a/sp ace.py\" \"b/sp ace.py\"\n--- \"a/sp ace.py\"\n+++ \"b/sp ace.py\"\n" + hunk,
		"diff --git x.py x.py\n--- x.py\n+++ x.py\n" + hunk,
		"diff --git http://h/a.py http://h/b.py\n" + hunk,
		"diff --git i/x.py w/x.py\n--- i/x.py\n+++ w/x.py\n" + hunk,
		// a space in a path: the header's source runs to the last " b/"
		"diff --git a/d b/c.py b/d b/c.py\n--- a/d b/c.py\n+++ b/d b/c.py\n" + hunk,
		// plain unified diffs, one and two files, with timestamps
		"--- a/x.py\t2024-01-01 00:00:00\n+++ b/x.py\t2024-01-01 00:00:01\n" + hunk + "--- a/y.py\n+++ b/y.py\n" + hunk,
		"--- x.py\n+++ x.py\n" + hunk,
		"--- \n+++ \n" + hunk,
		// mode changes, deleted, new, rename, copy, binary with and without a git header
		"diff --git a/s.sh b/s.sh\nold mode 100644\nnew mode 100755\n",
		"diff --git a/d.py b/d.py\ndeleted file mode 100644\nindex 1111111..0000000\n--- a/d.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n",
		"diff --git a/n.py b/n.py\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+a\n",
		"diff --git a/o.py b/p.py\nsimilarity index 100%\nrename from o.py\nrename to p.py\n",
		"diff --git a/o.py b/p.py\nsimilarity index 80%\nrename from o.py\nrename to p.py\nindex 1111111..2222222 100644\n--- a/o.py\n+++ b/p.py\n" + hunk,
		"diff --git a/i.png b/i.png\nindex 1111111..2222222 100644\nGIT binary patch\nliteral 1\nIcmZo*00001\n\nliteral 1\nIcmZo*00001\n\n",
		"Binary files a/i.png and b/i.png differ\n",
		"Binary file i.png has changed\n",
		// hunks: missing lengths, empty lines as context, CRLF, no-newline markers, a trailing blank
		"--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n",
		"--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n",
		"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n\n",
		"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n\n\n--- a/y\n+++ b/y\n" + hunk,
		// a "--- " line inside a git header block, and a "+++ " that names another file
		"diff --git a/x b/x\n--- a/x\n--- a/y\n+++ b/x\n" + hunk,
		"diff --git a/x b/x\n--- a/x\n+++ b/other\n" + hunk,
		// what unidiff refuses
		"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n",
		"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n-b\n+c\n",
		"--- a/x\n+++ b/x\n@@ -1 +1 @@\n*a\n",
		"+++ b/x\n" + hunk,
		hunk,
		"\\ No newline at end of file\n",
		"new file mode 100644\n",
		"GIT binary patch\n",
		"--- a/x\n+++ b/x\n@@ -١ +1 @@\n-a\n+b\n",
		"--- a/x\n+++ b/x\n@@ -𝟏,𝟐 +٣,۲ @@\n a\n-b\n+c\n",
		"--- a/x\n+++ b/x\n@@ -1,١٠ +1 @@\n-a\n",
	}
	in, _ := json.Marshal(patches)
	var refs []struct {
		Modified []string `json:"modified"`
		Paths    []string `json:"paths"`
		Error    string   `json:"error"`
	}
	if err := json.Unmarshal(swebenchref.Run(t, "patch_files.py", in), &refs); err != nil {
		t.Fatal(err)
	}
	for i, p := range patches {
		ref := refs[i]
		files, err := parsePatchSet(p)
		mod, errMod := modifiedFiles(p)
		switch {
		case ref.Error != "":
			if err == nil || errMod == nil {
				t.Errorf("patch %d: unidiff refuses it (%s), the port parsed %d files\n%s", i, ref.Error, len(files), p)
			}
			continue
		case err != nil:
			t.Errorf("patch %d: unidiff parses it, the port refused: %v\n%s", i, err, p)
			continue
		}
		var paths []string
		for _, f := range files {
			paths = append(paths, f.path())
		}
		if !slices.Equal(mod, ref.Modified) || !slices.Equal(paths, ref.Paths) {
			t.Errorf("patch %d: modified %q paths %q, unidiff %q %q\n%s", i, mod, paths, ref.Modified, ref.Paths, strings.TrimSpace(p))
		}
	}
}
