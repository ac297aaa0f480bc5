package recording

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"evals.si/agent"
	"evals.si/trajectory"
)

type recAgent struct {
	r     *Recorder
	inner agent.Agent
}

// Close closes the inner agent when it holds resources (io.Closer), so
// wrapping does not hide them from whoever ends the run.
func (a *recAgent) Close() error {
	if c, ok := a.inner.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Run runs the inner agent as one recorded or replayed trial.
func (a *recAgent) Run(ctx context.Context, task agent.Task) (res agent.Result, err error) {
	if task.Emit == nil {
		return agent.Result{}, errors.New("recording: task has no event sink")
	}
	t, err := a.r.begin(task.RecordID, task.Trial)
	if err != nil {
		return agent.Result{}, err
	}
	defer func() {
		if cerr := a.r.end(t); cerr != nil && err == nil {
			err = cerr
		}
	}()
	emit := task.Emit
	if a.r.mode == ModeReplay {
		note := fmt.Sprintf("replaying %s: %d agent model calls and %d tool results recorded", t.path, len(t.recorded[RoleAgent]), len(t.recTools))
		if a.r.branch > 0 {
			note += fmt.Sprintf("; live after model call %d (branch_at_step)", a.r.branch)
		}
		if err := emit.Emit(trajectory.Event{Kind: trajectory.KindLog, Time: time.Now(), Log: &trajectory.Log{Text: note}}); err != nil {
			return agent.Result{}, fmt.Errorf("recording log event: %w", err)
		}
	}
	task.Emit = trajectory.SinkFunc(func(e trajectory.Event) error { return a.r.observe(t, e, emit) })
	return a.inner.Run(ctx, task)
}

// observe records tool calls and results (record) or compares replayed
// results with the recorded ones (replay), then passes the event on.
func (r *Recorder) observe(t *trial, e trajectory.Event, next trajectory.Sink) error {
	switch {
	case e.Kind == trajectory.KindToolCall && e.ToolCall != nil && r.mode == ModeRecord:
		t.mu.Lock()
		t.pend[e.ToolCall.ID] = *e.ToolCall
		t.mu.Unlock()
	case e.Kind == trajectory.KindToolResult && e.ToolResult != nil:
		t.mu.Lock()
		k := t.tools
		t.tools++
		if r.mode == ModeRecord {
			call, ok := t.pend[e.ToolResult.CallID]
			delete(t.pend, e.ToolResult.CallID)
			res := *e.ToolResult
			res.Divergence = ""
			l := Line{Type: TypeTool, Index: k, Step: e.Step, Result: &res}
			if ok {
				l.Call = &call
			}
			var err error
			if t.file != nil {
				err = appendLine(t.file, l)
			}
			t.mu.Unlock()
			if err != nil {
				return fmt.Errorf("recording tool result %d: %w", k, err)
			}
			break
		}
		// Replay: only results of replayed model calls are compared; past
		// branch_at_step the run is live and may differ freely.
		compare := r.branch == 0 || e.Step <= r.branch
		var div *trajectory.Divergence
		if compare {
			if k < len(t.recTools) {
				div = diverge(*t.recTools[k].Result, *e.ToolResult)
			} else {
				div = &trajectory.Divergence{Tool: e.ToolResult.Name, CallID: e.ToolResult.CallID,
					Summary: fmt.Sprintf("the recording has no tool result %d", k), Replayed: clip(e.ToolResult.Output)}
			}
		}
		t.mu.Unlock()
		if div == nil {
			break
		}
		res := *e.ToolResult
		res.Divergence = div.Summary
		e.ToolResult = &res
		if err := next.Emit(e); err != nil {
			return err
		}
		return next.Emit(trajectory.Event{Kind: trajectory.KindDivergence, Step: e.Step, Time: time.Now(), Divergence: div})
	}
	return next.Emit(e)
}

// diverge compares a replayed tool result with the recorded one; nil when
// they agree. Durations and times are not compared.
func diverge(rec, got trajectory.ToolResult) *trajectory.Divergence {
	var what []string
	if rec.Name != got.Name {
		what = append(what, fmt.Sprintf("tool %s, recorded %s", got.Name, rec.Name))
	}
	if ec, rc := exitCode(got.ExitCode), exitCode(rec.ExitCode); ec != rc {
		what = append(what, fmt.Sprintf("exit code %s, recorded %s", ec, rc))
	}
	if rec.IsError != got.IsError {
		what = append(what, fmt.Sprintf("is_error %t, recorded %t", got.IsError, rec.IsError))
	}
	if rec.Output != got.Output {
		what = append(what, fmt.Sprintf("output differs from line %d", firstDiffLine(rec.Output, got.Output)))
	}
	if len(what) == 0 {
		return nil
	}
	return &trajectory.Divergence{Tool: got.Name, CallID: got.CallID, Summary: strings.Join(what, "; "),
		Recorded: clip(rec.Output), Replayed: clip(got.Output)}
}

func exitCode(p *int) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// firstDiffLine is the number (from 1) of the first line where a and b
// differ.
func firstDiffLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

func clip(s string) string {
	if len(s) <= clipDivergence {
		return s
	}
	return s[:clipDivergence] + "…"
}
