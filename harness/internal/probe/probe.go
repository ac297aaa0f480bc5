// Package probe is a harness for conformance tests: what it does is chosen
// by the first word of the task's instruction, and its Teardown writes the
// calls it saw to probe-calls.txt in the workdir (through the Worker), so a
// test can see that Teardown ran and in what order the calls came. The
// Python twin is harness/external/testdata/probe_harness.py.
//
//	ok         streams EventCount log events (the first carries the output
//	           of `echo probe` run through Worker.Exec), answers, and
//	           gives the verdict pass, score 0.75
//	fail-setup Setup fails
//	fail-teardown  like ok, but Teardown fails (after writing the calls)
//	fail-run   streams 2 events, then Run fails
//	die-run    streams 2 events, then the harness dies (Die)
//	bad-event  streams a checker event, which a harness may not send
//	hang       streams the log "hanging", then waits until the worker
//	           cancels the run
//	env        logs "OPENAI_API_KEY=<its value in the harness's environment>"
//	timeout    runs `sleep 30` with a 200ms timeout through Worker.Exec
//	           (the worker records the denial) and logs "timed out: true"
package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"evals.si/harness/harnesspb"
	"evals.si/harness/server"
	"evals.si/sandbox"
	"evals.si/trajectory"
)

// EventCount is how many log events the ok mode streams.
const EventCount = 5

// CallsFile is where Teardown writes the calls, in the workdir.
const CallsFile = "probe-calls.txt"

// Harness is the probe. Die is called by die-run mode and must not return
// normally before the harness is gone (exit the process, or stop the
// server and block).
type Harness struct {
	Die func()
}

type state struct {
	mu    sync.Mutex
	calls []string
}

func (s *state) add(c string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

func mode(t *server.Trial) string {
	f := strings.Fields(t.Task.Instruction)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// Describe implements server.Harness.
func (h *Harness) Describe(context.Context) (server.Info, error) {
	return server.Info{Name: "probe", Version: "1.0.0", Capabilities: []string{harnesspb.CapabilityCheck}}, nil
}

// Setup implements server.Harness.
func (h *Harness) Setup(_ context.Context, t *server.Trial) error {
	s := &state{}
	t.State = s
	s.add("setup")
	if mode(t) == "fail-setup" {
		return errors.New("probe: setup fails as asked")
	}
	return nil
}

// Run implements server.Harness.
func (h *Harness) Run(ctx context.Context, t *server.Trial, emit func(trajectory.Event) error) (server.Result, error) {
	t.State.(*state).add("run")
	switch m := mode(t); m {
	case "ok", "fail-teardown":
		out, err := t.Worker.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo probe"}})
		if err != nil {
			return server.Result{}, err
		}
		for i := 1; i <= EventCount; i++ {
			text := fmt.Sprintf("probe event %d", i)
			if i == 1 {
				text += ": " + strings.TrimSpace(string(out.Stdout))
			}
			if err := emit(trajectory.Event{Kind: trajectory.KindLog, Step: i, Log: &trajectory.Log{Text: text}}); err != nil {
				return server.Result{}, err
			}
		}
		if err := emit(trajectory.Event{Kind: trajectory.KindMessage, Step: EventCount, Message: &trajectory.Message{Role: trajectory.RoleAssistant, Content: "probe done"}}); err != nil {
			return server.Result{}, err
		}
		return server.Result{Output: "probe done", StopReason: "answered"}, nil
	case "fail-run", "die-run":
		for i := 1; i <= 2; i++ {
			if err := emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: fmt.Sprintf("probe event %d", i)}}); err != nil {
				return server.Result{}, err
			}
		}
		if m == "die-run" {
			h.Die()
		}
		return server.Result{}, errors.New("probe: run fails as asked")
	case "hang":
		if err := emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "hanging"}}); err != nil {
			return server.Result{}, err
		}
		<-ctx.Done()
		return server.Result{}, ctx.Err()
	case "env":
		if err := emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "OPENAI_API_KEY=" + os.Getenv("OPENAI_API_KEY")}}); err != nil {
			return server.Result{}, err
		}
		return server.Result{Output: "env", StopReason: "answered"}, nil
	case "timeout":
		out, err := t.Worker.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: 200 * time.Millisecond})
		if err != nil {
			return server.Result{}, err
		}
		if err := emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: fmt.Sprintf("timed out: %t", out.TimedOut)}}); err != nil {
			return server.Result{}, err
		}
		return server.Result{Output: "slept", StopReason: "answered"}, nil
	case "bad-event":
		if err := emit(trajectory.Event{Kind: trajectory.KindChecker, Checker: &trajectory.Checker{Pass: true, Score: 1}}); err != nil {
			return server.Result{}, err
		}
		return server.Result{Output: "forged", StopReason: "answered"}, nil
	default:
		return server.Result{}, fmt.Errorf("probe: unknown mode %q", m)
	}
}

// Check implements server.Harness.
func (h *Harness) Check(_ context.Context, t *server.Trial) (*server.Verdict, error) {
	t.State.(*state).add("check")
	return &server.Verdict{Pass: true, Score: 0.75, Details: "probe verdict"}, nil
}

// Teardown implements server.Harness.
func (h *Harness) Teardown(ctx context.Context, t *server.Trial) error {
	s := t.State.(*state)
	s.add("teardown")
	s.mu.Lock()
	calls := strings.Join(s.calls, ",")
	s.mu.Unlock()
	if err := t.Worker.WriteFile(ctx, CallsFile, []byte(calls), 0o644); err != nil {
		return err
	}
	if mode(t) == "fail-teardown" {
		return errors.New("probe: teardown fails as asked")
	}
	return nil
}
