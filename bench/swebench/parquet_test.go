package swebench

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/parquet-go/parquet-go"

	"evals.si/bench/internal/benchdata"
)

// hfRow is the shape of SWE-bench's published parquet: FAIL_TO_PASS and
// PASS_TO_PASS are JSON strings there.
type hfRow struct {
	Repo                   string `parquet:"repo"`
	InstanceID             string `parquet:"instance_id"`
	BaseCommit             string `parquet:"base_commit"`
	Patch                  string `parquet:"patch"`
	TestPatch              string `parquet:"test_patch"`
	ProblemStatement       string `parquet:"problem_statement"`
	HintsText              string `parquet:"hints_text"`
	CreatedAt              string `parquet:"created_at"`
	Version                string `parquet:"version"`
	FailToPass             string `parquet:"FAIL_TO_PASS"`
	PassToPass             string `parquet:"PASS_TO_PASS"`
	EnvironmentSetupCommit string `parquet:"environment_setup_commit"`
}

func TestParquetDirectory(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(benchdata.Dir(t, "swebench"), "swe-bench-dev-easy.sqlfluff__sqlfluff-2386.json"))
	if err != nil {
		t.Fatal(err)
	}
	var src []Instance
	if err := json.Unmarshal(b, &src); err != nil {
		t.Fatal(err)
	}
	in := src[0]
	f2p, _ := json.Marshal([]string(in.FailToPass))
	p2p, _ := json.Marshal([]string(in.PassToPass))
	dir := t.TempDir()
	row := hfRow{Repo: in.Repo, InstanceID: in.InstanceID, BaseCommit: in.BaseCommit, Patch: in.Patch, TestPatch: in.TestPatch,
		ProblemStatement: in.ProblemStatement, Version: in.Version, FailToPass: string(f2p), PassToPass: string(p2p)}
	if err := parquet.WriteFile(filepath.Join(dir, "test.parquet"), []hfRow{row}); err != nil {
		t.Fatal(err)
	}
	got, err := readInstances(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0].FailToPass, in.FailToPass) || !reflect.DeepEqual(got[0].PassToPass, in.PassToPass) || got[0].TestPatch != in.TestPatch {
		t.Fatalf("read %+v", got)
	}
	u, _ := url.Parse("swebench://.?instances=" + in.InstanceID)
	res, err := Importer{}.Import(context.Background(), u, dir)
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("import from a directory: %v %+v", err, res)
	}
}
