package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv"
)

func benchdataDir(t *testing.T) string {
	t.Helper()
	p, _ := filepath.Abs("../../../shared/benchdata")
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "benchdata", p+" is not there")
	}
	return p
}

func TestDatasetsInspect(t *testing.T) {
	dir := benchdataDir(t)
	cases := []struct {
		uri  string
		want []string
	}{
		// Translated Dockerfiles depend on their base image's config, which
		// is not read: never "ok", each with what is honoured in part.
		{"terminal-bench://" + dir + "/terminal-bench", []string{"3 task(s) import (3 honoured only in part), 0 refused", "partial  evoeval/76\n           - the config of image ghcr.io/laude-institute/t-bench/python-3-13:20250620 is not read", "COPY at line 26: files are placed before the first RUN"}},
		{"harbor://" + dir + "/harbor", []string{"2 task(s) import (2 honoured only in part), 1 refused", "partial  hello-world\n", "refused  hello-multi-step-simple: multi-step task"}},
		{"swebench://" + dir + "/swebench/swe-bench-dev-easy.sqlfluff__sqlfluff-2386.json", []string{"1 task(s) import (0 honoured only in part), 0 refused", "ok       sqlfluff__sqlfluff-2386"}},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"datasets", "inspect", c.uri}, &out, &errb)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.uri, code, errb.String())
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", c.uri, w, out.String())
			}
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"datasets", "inspect", "-json", "harbor://" + dir + "/harbor"}, &out, &errb); code != 0 {
		t.Fatalf("-json: exit %d: %s", code, errb.String())
	}
	var js struct {
		Imported []string            `json:"imported"`
		Partial  map[string][]string `json:"partial"`
		Refused  []struct{ Task, Reason string }
	}
	if err := json.Unmarshal(out.Bytes(), &js); err != nil || len(js.Imported) != 2 || len(js.Partial["hello-world"]) == 0 || len(js.Refused) != 1 {
		t.Errorf("-json: %v %+v", err, js)
	}
	if code := run(context.Background(), []string{"datasets", "inspect", "harbor://" + dir + "/nope"}, &out, &errb); code != exitUsage {
		t.Errorf("a missing dataset: exit %d, want %d (%s)", code, exitUsage, errb.String())
	}
	if code := run(context.Background(), []string{"datasets", "inspect", "ftp://x"}, &out, &errb); code != exitUsage {
		t.Errorf("an unknown scheme: exit %d, want %d", code, exitUsage)
	}
}
