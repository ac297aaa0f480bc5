package oracle_test

import (
	"testing"

	"evals.si/internal/testenv/benchimage"
	"evals.si/internal/testenv/vmtest"
)

// TestOracleTerminalBenchTransposeQEMU: the same Terminal-Bench task as
// TestOracleTerminalBenchTranspose, graded by its own run-tests.sh, in a
// microVM of the qemu rung: the image becomes the VM's root disk, setup is
// snapshotted and the trial restores it.
func TestOracleTerminalBenchTransposeQEMU(t *testing.T) {
	set := vmtest.Settings(t, "../..")
	img := benchimage.Ref(t, "../..")
	dir := benchdata(t, "terminal-bench")
	scores := runSpec(t, `
dataset: {uri: "terminal-bench://`+dir+`?tasks=polyglot_python_transpose&network=deny&image=`+img+`"}
target: {agent: {oracle: {}}}
evaluators: [{name: task-success}]
environment:
  sandbox:
    ladder: [qemu]
    qemu: {kernel: "`+set.Kernel+`", guest: "`+set.Guest+`", memory_mb: 768}
`)
	if scores["task-success"] != 1 {
		t.Errorf("task-success = %v, want 1 (scores %v)", scores["task-success"], scores)
	}
}
