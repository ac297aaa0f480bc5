package server_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv"
)

// A taubench:// URI on a server reads its data_dir under datasets_dir only,
// never the server's TAU2_DATA_DIR, and task_file stays inside the domain's
// directory. Refusals write nothing.
func TestSubmitTauBench(t *testing.T) {
	f := newFixture(t, nil)
	wd, _ := os.Getwd()
	samples := filepath.Join(wd, "..", "..", "shared", "benchdata", "tau2", "retail")
	dir := filepath.Join(f.dir, "tau2", "retail")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"policy.md", "tasks.first5.json"} {
		b, err := os.ReadFile(filepath.Join(samples, name))
		if err != nil {
			testenv.Missing(t, "the tau2 sample of ../shared/benchdata", err.Error())
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TAU2_DATA_DIR", filepath.Join(f.dir, "tau2"))
	withDataset := func(uri string) map[string]any {
		s := modelSpec("tau", "ALPHA_KEY")
		s["dataset"] = map[string]any{"uri": uri}
		return s
	}
	run := f.submit(alphaEditor, withDataset("taubench://retail?data_dir=tau2&tasks=0"))
	l := f.lease(workerTok, "w1", run.ID)
	var rec struct {
		ID       string `json:"id"`
		Metadata struct {
			Taubench struct {
				Domain string `json:"domain"`
				Task   struct{ ID string }
			} `json:"taubench"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(l.Record, &rec); err != nil || rec.ID != "0" || rec.Metadata.Taubench.Domain != "retail" || rec.Metadata.Taubench.Task.ID != "0" {
		t.Errorf("leased %s (%v), want retail task 0", l.Record, err)
	}
	// A record of another source naming its own domain directory is
	// refused: the harness would read (and show the model) files there.
	inline := modelSpec("tau", "ALPHA_KEY")
	inline["dataset"] = map[string]any{"records": []any{map[string]any{"id": "x", "input": "hi",
		"metadata": map[string]any{"taubench": map[string]any{"domain": "retail", "dir": "/etc", "task": map[string]any{"id": "x"}}}}}}
	before := f.snapshot()
	r := f.do("POST", "/v1/runs", alphaEditor, map[string]any{"spec": inline})
	apiError(t, r, http.StatusUnprocessableEntity, "refused", "metadata.taubench")
	if after := f.snapshot(); after != before {
		t.Errorf("a refused submit wrote something:\n%s", after)
	}
	for name, uri := range map[string]string{
		"no data_dir":              "taubench://retail",
		"data_dir out of datasets": "taubench://retail?data_dir=../outside",
		"an absolute data_dir":     "taubench://retail?data_dir=/etc",
		"an absolute task_file":    "taubench://retail?data_dir=tau2&task_file=/etc/passwd",
		"a task_file with ..":      "taubench://retail?data_dir=tau2&task_file=../../../secret.json",
	} {
		t.Run(name, func(t *testing.T) {
			before := f.snapshot()
			r := f.do("POST", "/v1/runs", alphaEditor, map[string]any{"spec": withDataset(uri)})
			apiError(t, r, http.StatusBadRequest, "bad_request", "dataset.uri")
			if name == "no data_dir" && !strings.Contains(string(r.body), "TAU2_DATA_DIR is not read") {
				t.Errorf("the refusal does not say the server's TAU2_DATA_DIR is not read: %s", r.body)
			}
			if after := f.snapshot(); after != before {
				t.Errorf("a refused submit wrote something:\n%s", after)
			}
		})
	}
}
