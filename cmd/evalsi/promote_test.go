package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/dataset"
)

// evalsiStore runs a command that takes --store (promote, shadow) in
// process.
func evalsiStore(storePath string, args ...string) result {
	var out, errb bytes.Buffer
	full := append(append([]string{}, args...), "--store", storePath)
	return result{code: run(context.Background(), full, &out, &errb), stdout: out.String(), stderr: errb.String()}
}

// TestPromoteCommand promotes the failures of capitals-offline (peru and
// kenya miss exact-match) into datasets/ beside the store, twice, and checks
// the usage errors.
func TestPromoteCommand(t *testing.T) {
	db := filepath.Join(t.TempDir(), "evalsi.db")
	r := evalsi(t, db, "run", "-f", "../../examples/capitals-offline.yaml", "--json")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id := r.json.RunID
	file := filepath.Join(filepath.Dir(db), "datasets", "promoted", "local", "capital-fails.jsonl")

	r = evalsiStore(db, "promote", id, "--dataset", "capital-fails", "--when", `scores["exact-match"] < 1.0`, "--include-outputs")
	if r.code != 0 || !strings.Contains(r.stdout, "promoted 2 record(s)") || !strings.Contains(r.stdout, file) {
		t.Fatalf("promote: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	recs, err := dataset.ReadFile(file)
	if err != nil || len(recs) != 2 || !strings.HasPrefix(recs[0].ID, id+"/") || !strings.Contains(string(recs[0].Metadata["promoted_from"]), `"output"`) {
		t.Fatalf("promoted file: %v, %+v", err, recs)
	}
	before, _ := os.ReadFile(file)
	// Again, the run given by a prefix and the flags before it: nothing added.
	r = evalsiStore(db, "promote", "--dataset", "capital-fails", "--when", `scores["exact-match"] < 1.0`, id[:len(id)-2])
	if r.code != 0 || !strings.Contains(r.stdout, "promoted 0 record(s)") || !strings.Contains(r.stdout, "(2 already there)") {
		t.Errorf("promote again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(before, after) {
		t.Errorf("promoting again changed the file")
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"promote", id, "--dataset", "x", "--when", `scores["exact-match"] <`}, "--when: at 1:24: Syntax error"},
		{[]string{"promote", id, "--dataset", "x", "--when", `scores["no-such"] < 1.0`}, "--when on record"},
		{[]string{"promote", id, "--dataset", "../x", "--when", "true"}, "not a dataset name"},
		{[]string{"promote", id, "--when", "true"}, "needs --dataset NAME and --when"},
		{[]string{"promote", "r-nope", "--dataset", "x", "--when", "true"}, "not found"},
		{[]string{"promote", "--dataset", "x", "--when", "true"}, "needs one RUN"},
	} {
		if r := evalsiStore(db, c.args...); r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(file), "x.jsonl")); !os.IsNotExist(err) {
		t.Errorf("a failed promote created its dataset: %v", err)
	}
}
