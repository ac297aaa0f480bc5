package embedded

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"evals.si/engine"
	"evals.si/store"
	"evals.si/trajectory"
)

// capsSpec is an agent run on the bwrap rung whose one bash command prints
// 2 GiB, with caps.command_output_kb at 256.
const capsSpec = `name: caps-e2e
dataset:
  records:
    - {id: chatty, input: "Print a lot."}
target:
  connector: scripted
  model: scripted-agent
  script:
    default:
      - content: Printing 2 GiB.
        tool_calls:
          - name: bash
            arguments: {command: "head -c 2147483648 /dev/zero | tr '\\0' x"}
      - content: Done.
harness:
  builtin: {max_steps: 4}
environment:
  sandbox: {workdir: /workspace, network: deny, ladder: [bwrap]}
  command_timeout: 10m
caps: {command_output_kb: 256}
evaluators: [policy-violations, agent-efficiency]
`

// A trial that prints gigabytes completes with its output cut at the
// run's cap, and the engine's heap does not grow with the output: output
// streams through the sandbox's cap instead of being buffered.
func TestTrialPrintingGigabytesDoesNotGrowTheEngine(t *testing.T) {
	requireAgentSandbox(t)
	f := writeSpec(t, capsSpec)
	a := openApp(t)

	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	runtime.GC()
	base := heap()
	var (
		peak uint64
		wg   sync.WaitGroup
	)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, heap())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	sum, err := a.Run(context.Background(), f, RunOptions{})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	grew := int64(peak) - int64(base)
	t.Logf("run took %s; Go heap %d MiB before, peak %d MiB (grew %d MiB)", time.Since(start).Round(time.Millisecond), base>>20, peak>>20, grew>>20)
	if grew >= 256<<20 {
		t.Errorf("the Go heap grew by %d MiB while the trial printed 2 GiB; want less than 256 MiB", grew>>20)
	}

	ctx := context.Background()
	trials, err := a.Store().ListTrials(ctx, sum.RunID)
	if err != nil || len(trials) != 1 {
		t.Fatalf("trials %v, %v", trials, err)
	}
	if tr := trials[0]; sum.Status != engine.StatusCompleted || sum.Errored != 0 || tr.Status != store.TrialFinished || tr.Attempt != 1 {
		t.Fatalf("run %s, trial %s at attempt %d (%s: %s); want the run completed and the trial finished at its first attempt",
			sum.Status, tr.Status, tr.Attempt, tr.ErrorKind, tr.Error)
	}
	events, err := a.Store().Events(ctx, trials[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var results []*trajectory.ToolResult
	rung := ""
	for _, e := range events {
		switch {
		case e.Kind == trajectory.KindToolResult:
			results = append(results, e.ToolResult)
		case e.Kind == trajectory.KindLog && strings.HasPrefix(e.Log.Text, "sandbox: rung "):
			rung = e.Log.Text
		}
	}
	if !strings.HasPrefix(rung, "sandbox: rung bwrap") {
		t.Errorf("sandbox log %q, want the bwrap rung", rung)
	}
	if len(results) != 1 {
		t.Fatalf("%d tool results, want 1", len(results))
	}
	// The sandbox kept 256 KiB of stdout; the model saw its head and tail,
	// and the result says where the sandbox cut.
	r := results[0]
	const kept = 256 << 10
	for _, want := range []string{
		"exit code: 0\n",
		fmt.Sprintf("[... %d bytes omitted ...]", kept-(4<<10)-(8<<10)),
		fmt.Sprintf("[stdout was cut by the sandbox at %d bytes]", kept),
	} {
		if !strings.Contains(r.Output, want) {
			t.Errorf("the stored tool result does not say %q:\n%.600s", want, r.Output)
		}
	}
	if !r.Truncated || len(r.Output) > 16<<10 {
		t.Errorf("stored tool result: %d bytes, truncated %v", len(r.Output), r.Truncated)
	}
}
