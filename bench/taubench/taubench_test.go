package taubench

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv"
)

func samples(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "benchdata", "tau2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		testenv.Missing(t, "tau2 samples", dir+" is not there")
	}
	return dir
}

func importURI(t *testing.T, uri string, getenv func(string) string) (int, []string, error) {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Importer{Getenv: getenv}.Import(context.Background(), u, "/")
	if err != nil {
		return 0, nil, err
	}
	var refused []string
	for _, r := range res.Refused {
		refused = append(refused, r.Task+": "+r.Reason)
	}
	return len(res.Records), refused, nil
}

func TestImport(t *testing.T) {
	dir := samples(t)
	env := func(k string) string {
		if k == DataDirEnv {
			return dir
		}
		return ""
	}
	cases := []struct {
		name, uri      string
		getenv         func(string) string
		records, nrefs int
		err            string
	}{
		{"retail: judge tasks refused", "taubench://retail?data_dir=" + dir, nil, 2, 3, ""},
		{"telecom", "taubench://telecom?data_dir=" + dir, nil, 10, 0, ""},
		{"TAU2_DATA_DIR", "taubench://telecom", env, 10, 0, ""},
		{"the domain's own directory", "taubench://retail?data_dir=" + filepath.Join(dir, "retail"), nil, 2, 3, ""},
		{"tasks selected", "taubench://retail?tasks=1,0&data_dir=" + dir, nil, 2, 0, ""},
		{"task_file", "taubench://airline?task_file=tasks.first10.json&data_dir=" + dir, nil, 10, 0, ""},
		{"no data dir", "taubench://retail", nil, 0, 0, "TAU2_DATA_DIR"},
		{"unknown domain", "taubench://banking?data_dir=" + dir, nil, 0, 0, `no τ-bench domain "banking"`},
		{"no domain", "taubench://?data_dir=" + dir, nil, 0, 0, "names no domain"},
		{"unknown task", "taubench://retail?tasks=99&data_dir=" + dir, nil, 0, 0, `no task "99"`},
		{"unknown parameter", "taubench://retail?split=test&data_dir=" + dir, nil, 0, 0, `unknown query parameter "split"`},
		{"image", "taubench://retail?image=x&data_dir=" + dir, nil, 0, 0, "without a sandbox"},
		{"missing domain dir", "taubench://retail?data_dir=" + t.TempDir(), nil, 0, 0, "no retail domain under"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, refused, err := importURI(t, c.uri, c.getenv)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want it to say %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != c.records || len(refused) != c.nrefs {
				t.Fatalf("%d records, %d refused (%v); want %d, %d", n, len(refused), refused, c.records, c.nrefs)
			}
			for _, r := range refused {
				if !strings.Contains(r, "NL_ASSERTION") {
					t.Errorf("refusal %q does not say why", r)
				}
			}
		})
	}
}

// Several task files and no tasks.json: the error lists them.
func TestTaskFileChoice(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"policy.md", "tasks_a.json", "tasks_b.json"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("[]"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := importURI(t, "taubench://retail?data_dir="+dir, nil)
	if err == nil || !strings.Contains(err.Error(), "tasks_a.json, tasks_b.json") || !strings.Contains(err.Error(), "task_file=") {
		t.Fatalf("err %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tasks_a.json"), []byte(`[{"id": "x", "evaluation_criteria": {"reward_basis": ["VIBES"]}}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = importURI(t, "taubench://retail?task_file=tasks_a.json&data_dir="+dir, nil)
	if err == nil || !strings.Contains(err.Error(), `unknown reward basis "VIBES"`) || !strings.Contains(err.Error(), "tasks_a.json") {
		t.Fatalf("err %v", err)
	}
}
