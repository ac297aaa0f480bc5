package oracle_test

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"evals.si/agent"
	"evals.si/agent/oracle"
	"evals.si/bench/importer"
	"evals.si/dockerfile"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
	"evals.si/trajectory"
)

// The bwrap rung re-executes the test binary as its launcher.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// TestSolutionShape: the importers' Solution and the oracle's are one JSON
// shape (the agent layer does not import the benchmark layer).
func TestSolutionShape(t *testing.T) {
	a, b := reflect.TypeOf(importer.Solution{}), reflect.TypeOf(oracle.Solution{})
	if a.NumField() != b.NumField() {
		t.Fatalf("%d fields vs %d", a.NumField(), b.NumField())
	}
	for i := range a.NumField() {
		fa, fb := a.Field(i), b.Field(i)
		if fa.Name != fb.Name || fa.Type != fb.Type || fa.Tag != fb.Tag {
			t.Errorf("field %d: %s %s %q vs %s %s %q", i, fa.Name, fa.Type, fa.Tag, fb.Name, fb.Type, fb.Tag)
		}
	}
	if importer.MetaSolution != oracle.MetaSolution {
		t.Errorf("metadata keys differ: %q vs %q", importer.MetaSolution, oracle.MetaSolution)
	}
}

func TestOracleRunsSolution(t *testing.T) {
	r := bwraptest.Rung(t)
	sb, err := r.Create(t.Context(), sandbox.Config{Workdir: "/work/task", StateDir: t.TempDir(), CommandTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())

	files, fix := dockerfile.EncodeFiles(map[string]dockerfile.File{
		"/work/task/solve.sh": {Data: []byte("cp /work/task/blob.bin out.bin && echo \"$GREETING\" > hello.txt\n"), Mode: 0o755},
		"/work/task/blob.bin": {Data: []byte{0, 1, 2, 0xff}, Mode: 0o644},
	})
	sol := importer.Solution{Files: files, Setup: fix, Command: "bash /work/task/solve.sh", Env: map[string]string{"GREETING": "hi"}}
	raw, _ := json.Marshal(sol)
	// Each task carries its own record's metadata: the oracle holds no
	// record list, so any worker's oracle answers any record.
	withSolution := map[string]spec.JSON{"solution": raw}
	var events []trajectory.Event
	emit := trajectory.SinkFunc(func(e trajectory.Event) error { events = append(events, e); return nil })
	o := oracle.New()
	res, err := o.Run(t.Context(), agent.Task{RecordID: "t1", Metadata: withSolution, Sandbox: sb, Workdir: "/work/task", Emit: emit})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Output, "exited 0") {
		t.Errorf("output %q", res.Output)
	}
	if b, _ := sb.ReadFile(t.Context(), "hello.txt"); string(b) != "hi\n" {
		t.Errorf("hello.txt = %q", b)
	}
	if b, _ := sb.ReadFile(t.Context(), "out.bin"); string(b) != "\x00\x01\x02\xff" {
		t.Errorf("binary file decoded as %q", b)
	}
	if len(events) != 3 || events[0].Kind != trajectory.KindToolCall || events[1].Kind != trajectory.KindToolResult {
		t.Errorf("events %+v", events)
	}
	for _, md := range []map[string]spec.JSON{nil, {"solution": spec.JSON("null")}} {
		if _, err := o.Run(t.Context(), agent.Task{RecordID: "t2", Metadata: md, Sandbox: sb, Workdir: "/work/task"}); err == nil {
			t.Errorf("a record without a solution (metadata %v) must be an error", md)
		}
	}
}
