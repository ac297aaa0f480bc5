package main

import (
	"bytes"
	"context"
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
		{"terminal-bench://" + dir + "/terminal-bench", []string{"3 task(s) import, 0 refused", "ok       evoeval/76"}},
		{"harbor://" + dir + "/harbor", []string{"2 task(s) import, 1 refused", "refused  hello-multi-step-simple: multi-step task"}},
		{"swebench://" + dir + "/swebench/swe-bench-dev-easy.sqlfluff__sqlfluff-2386.json", []string{"1 task(s) import, 0 refused", "sqlfluff__sqlfluff-2386"}},
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
	if code := run(context.Background(), []string{"datasets", "inspect", "harbor://" + dir + "/nope"}, &out, &errb); code != exitUsage {
		t.Errorf("a missing dataset: exit %d, want %d (%s)", code, exitUsage, errb.String())
	}
	if code := run(context.Background(), []string{"datasets", "inspect", "ftp://x"}, &out, &errb); code != exitUsage {
		t.Errorf("an unknown scheme: exit %d, want %d", code, exitUsage)
	}
}
