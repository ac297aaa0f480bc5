// Package recording records and replays agent runs
// (harness.builtin.recording).
//
// Record mode captures every model call (request and response) and every
// tool call with its result, one JSONL file per trial. Replay mode serves
// the model calls from the recording and reruns the tool calls in the
// sandbox, which is rebuilt as usual; a tool result that differs from the
// recorded one is flagged in the trajectory (the tool_result's divergence
// field and a divergence event). With branch_at_step N, the first N model
// calls of the agent come from the recording and the rest from the live
// connector. The file format is in docs/recording.md.
//
// A Recorder has two halves that meet by (record, trial): Connector wraps
// a model connector, Agent wraps the agent. The agent wrapper starts and
// ends a trial's recording and watches its events; the connector wrapper
// records or serves the trial's model calls. Model calls outside any trial
// (the tool-call probe at start) go to calls.jsonl and are replayed by
// matching the request.
package recording

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"evals.si/agent"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Modes.
const (
	ModeRecord = "record"
	ModeReplay = "replay"
)

// RoleAgent is the role of the agent's own model calls; branch_at_step
// counts them. Other roles (the user simulator's) replay until the trial
// branches.
const RoleAgent = "agent"

// clipDivergence bounds the outputs a divergence event carries.
const clipDivergence = 4000

// Recorder records or replays one run.
type Recorder struct {
	mode   string
	dir    string
	branch int

	mu     sync.Mutex
	trials map[trialKey]*trial
	// otherN counts the calls appended to calls.jsonl (record);
	// otherLines are its lines (replay, read-only after Open).
	otherN     int
	otherLines []Line
}

type trialKey struct {
	record string
	trial  int
}

// Open starts a recording in dir (record: the directory is created, the
// manifest written and calls.jsonl truncated; trial files are rewritten
// as their trials run) or opens one for replay (dir must hold a recording
// of this format). specName goes in the manifest.
func Open(cfg spec.Recording, dir, specName string) (*Recorder, error) {
	r := &Recorder{mode: cfg.Mode, dir: dir, branch: cfg.BranchAtStep, trials: map[trialKey]*trial{}}
	switch cfg.Mode {
	case ModeRecord:
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating the recording directory: %w", err)
		}
		m, err := json.MarshalIndent(Manifest{Format: FormatVersion, Spec: specName, Created: time.Now().UTC()}, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), append(m, '\n'), 0o644); err != nil {
			return nil, fmt.Errorf("writing the recording manifest: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, OtherCallsFile), nil, 0o644); err != nil {
			return nil, fmt.Errorf("creating %s: %w", OtherCallsFile, err)
		}
	case ModeReplay:
		if _, err := ReadManifest(dir); err != nil {
			return nil, err
		}
		lines, err := ReadLines(filepath.Join(dir, OtherCallsFile))
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("reading the recording: %w", err)
		}
		r.otherLines = lines
	default:
		return nil, fmt.Errorf("recording mode %q: want record or replay", cfg.Mode)
	}
	return r, nil
}

// Connector wraps live: in record mode calls pass through and are
// recorded; in replay mode they are served from the recording (live is
// used past branch_at_step, and may be nil without one). role names whose
// calls these are (RoleAgent, or e.g. user_simulator).
func (r *Recorder) Connector(role string, live model.Connector) model.Connector {
	return &connector{r: r, role: role, live: live}
}

// Agent wraps an agent so that each of its runs is a recorded (or
// replayed) trial.
func (r *Recorder) Agent(a agent.Agent) agent.Agent { return &recAgent{r: r, inner: a} }

// trial is the recording state of one running trial.
type trial struct {
	key  trialKey
	path string

	mu    sync.Mutex
	file  *os.File                       // record
	next  map[string]int                 // next model call index per role
	tools int                            // next tool index
	pend  map[string]trajectory.ToolCall // record: calls awaiting their result

	recorded map[string][]Line // replay: model calls per role
	recTools []Line            // replay: tool lines
	branched bool
}

func (r *Recorder) begin(recordID string, n int) (*trial, error) {
	k := trialKey{recordID, n}
	t := &trial{key: k, path: TrialPath(r.dir, recordID, n), next: map[string]int{}, pend: map[string]trajectory.ToolCall{}}
	switch r.mode {
	case ModeRecord:
		if err := os.MkdirAll(filepath.Dir(t.path), 0o755); err != nil {
			return nil, fmt.Errorf("recording: %w", err)
		}
		// A retried trial starts its file anew.
		f, err := os.Create(t.path)
		if err != nil {
			return nil, fmt.Errorf("recording: %w", err)
		}
		t.file = f
	case ModeReplay:
		lines, err := ReadLines(t.path)
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("replay: the recording in %s has no trial %d of record %q (no %s)", r.dir, n, recordID, t.path)
		}
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		t.recorded = map[string][]Line{}
		for _, l := range lines {
			if l.Type == TypeModelCall {
				t.recorded[l.Role] = append(t.recorded[l.Role], l)
			} else {
				t.recTools = append(t.recTools, l)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, busy := r.trials[k]; busy {
		if t.file != nil {
			t.file.Close()
		}
		return nil, fmt.Errorf("recording: trial %d of record %q is already running", n, recordID)
	}
	r.trials[k] = t
	return t, nil
}

func (r *Recorder) end(t *trial) error {
	r.mu.Lock()
	delete(r.trials, t.key)
	r.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.file != nil {
		err := t.file.Close()
		t.file = nil
		if err != nil {
			return fmt.Errorf("recording: closing %s: %w", t.path, err)
		}
	}
	return nil
}

func (r *Recorder) running(recordID string, n int) *trial {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trials[trialKey{recordID, n}]
}

type connector struct {
	r    *Recorder
	role string
	live model.Connector
}

func (c *connector) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	t := c.r.running(req.RecordID, req.Trial)
	if t == nil {
		return c.r.otherCall(ctx, c.live, req)
	}
	if c.r.mode == ModeRecord {
		resp, err := c.live.Chat(ctx, req)
		if err != nil {
			return resp, err
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		i := t.next[c.role]
		t.next[c.role]++
		if t.file == nil {
			return resp, nil // the trial ended under the call
		}
		if err := appendLine(t.file, Line{Type: TypeModelCall, Role: c.role, Index: i, Request: fromRequest(req), Response: fromResponse(resp)}); err != nil {
			return model.Response{}, fmt.Errorf("recording model call %d: %w", i, err)
		}
		return resp, nil
	}

	if err := ctx.Err(); err != nil {
		return model.Response{}, err
	}
	t.mu.Lock()
	i := t.next[c.role]
	t.next[c.role]++
	if c.role == RoleAgent && c.r.branch > 0 && i >= c.r.branch {
		t.branched = true
	}
	rec := t.recorded[c.role]
	serve := !t.branched && i < len(rec)
	if !serve && !t.branched && c.r.branch > 0 && c.role == RoleAgent {
		// The recording ran out before branch_at_step: live from here.
		t.branched = true
	}
	live := t.branched
	var resp model.Response
	if serve {
		resp = rec[i].Response.toModel()
	}
	t.mu.Unlock()
	switch {
	case serve:
		return resp, nil
	case live && c.live != nil:
		return c.live.Chat(ctx, req)
	}
	return model.Response{}, fmt.Errorf("replay: recording has no %s model call %d for record %q trial %d (%s holds %d): record again, or set branch_at_step to continue live", c.role, i, req.RecordID, req.Trial, t.path, len(rec))
}

// otherCall records or replays a model call made outside any trial.
func (r *Recorder) otherCall(ctx context.Context, live model.Connector, req model.Request) (model.Response, error) {
	if r.mode == ModeRecord {
		resp, err := live.Chat(ctx, req)
		if err != nil {
			return resp, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		f, err := os.OpenFile(filepath.Join(r.dir, OtherCallsFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return model.Response{}, fmt.Errorf("recording a model call: %w", err)
		}
		err = appendLine(f, Line{Type: TypeModelCall, Index: r.otherN, Request: fromRequest(req), Response: fromResponse(resp)})
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("recording a model call: %w", cerr)
		}
		if err != nil {
			return model.Response{}, err
		}
		r.otherN++
		return resp, nil
	}
	want, err := json.Marshal(fromRequest(req))
	if err != nil {
		return model.Response{}, err
	}
	// The lines are read-only after Open. A call outside a trial is a
	// stateless probe, so a recorded answer may serve it more than once.
	for _, l := range r.otherLines {
		if l.Request == nil {
			continue
		}
		if got, err := json.Marshal(l.Request); err == nil && bytes.Equal(got, want) {
			return l.Response.toModel(), nil
		}
	}
	if r.branch > 0 && live != nil {
		return live.Chat(ctx, req)
	}
	return model.Response{}, fmt.Errorf("replay: %s has no recorded model call outside a trial matching this request (the tool-call probe, for model %q): record again", filepath.Join(r.dir, OtherCallsFile), req.Model)
}
