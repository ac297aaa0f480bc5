// Package domaintest checks a Go port of a tau2 domain against what tau2's
// own code did, side by side: the golden files scripts/tau2-reference
// records from tau2 (tools.json, traces.json) replayed call by call on the
// port, every tool message and database hash compared exactly.
package domaintest

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/tau2"
)

// Call is one recorded call and what tau2 answered.
type Call struct {
	Name      string          `json:"name"`
	Requestor string          `json:"requestor"`
	Arguments json.RawMessage `json:"arguments"`
	Content   string          `json:"content"`
	Error     bool            `json:"error"`
}

// State is the databases' hashes (user_db_hash null without a user side).
type State struct {
	DBHash     string  `json:"db_hash"`
	UserDBHash *string `json:"user_db_hash"`
}

// Trace is one recorded run: a task's gold actions, or a scenario of
// other calls.
type Trace struct {
	ID           string             `json:"id"`
	Name         string             `json:"name"`
	InitialState *tau2.InitialState `json:"initial_state"`
	Initial      *State             `json:"initial"`
	Calls        []Call             `json:"calls"`
	Final        State              `json:"final"`
	Assertions   []struct {
		Assertion tau2.EnvAssertion `json:"assertion"`
		Met       *bool             `json:"met"`
		Error     string            `json:"error"`
	} `json:"assertions"`
}

// Traces is a domain's traces.json.
type Traces struct {
	Tasks     []Trace `json:"tasks"`
	Scenarios []Trace `json:"scenarios"`
}

// Check replays every trace of tracesPath on fresh environments of d,
// failing at each difference from tau2.
func Check(t *testing.T, d domain.Data, tracesPath string) {
	t.Helper()
	raw, err := os.ReadFile(tracesPath)
	if err != nil {
		t.Fatalf("reading the golden traces: %v", err)
	}
	var tr Traces
	if err := json.Unmarshal(raw, &tr); err != nil {
		t.Fatalf("reading %s: %v", tracesPath, err)
	}
	if len(tr.Tasks)+len(tr.Scenarios) == 0 {
		t.Fatalf("%s has no traces", tracesPath)
	}
	for _, x := range tr.Tasks {
		t.Run("task/"+x.ID, func(t *testing.T) { replay(t, d, x) })
	}
	for _, x := range tr.Scenarios {
		t.Run("scenario/"+x.Name, func(t *testing.T) { replay(t, d, x) })
	}
}

func replay(t *testing.T, d domain.Data, x Trace) {
	w, err := tau2.NewWorld(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SetState(x.InitialState, nil); err != nil {
		t.Fatalf("setting the initial state: %v", err)
	}
	if x.Initial != nil {
		checkState(t, w, *x.Initial, "initially")
	}
	for i, c := range x.Calls {
		got := w.Respond(tau2.ToolCall{ID: "call", Name: c.Name, Arguments: c.Arguments, Requestor: c.Requestor})
		if got.Content != c.Content || got.Error != c.Error {
			t.Fatalf("call %d %s(%s) by %s:\n got (error=%v) %s\nwant (error=%v) %s", i, c.Name, c.Arguments, c.Requestor,
				got.Error, clip(got.Content), c.Error, clip(c.Content))
		}
	}
	checkState(t, w, x.Final, "after the calls")
	for _, a := range x.Assertions {
		met, err := w.Assert(a.Assertion)
		switch {
		case a.Error != "":
			if err == nil || !strings.Contains(err.Error(), a.Error) {
				t.Errorf("assertion %s: got %v, %v; tau2 failed with %q", a.Assertion.FuncName, met, err, a.Error)
			}
		case err != nil:
			t.Errorf("assertion %s: %v", a.Assertion.FuncName, err)
		case a.Met != nil && met != *a.Met:
			t.Errorf("assertion %s(%s): met=%v, tau2 says %v", a.Assertion.FuncName, a.Assertion.Arguments, met, *a.Met)
		}
	}
}

func checkState(t *testing.T, w *tau2.World, want State, when string) {
	t.Helper()
	agent, user, err := w.Hashes()
	if err != nil {
		t.Fatal(err)
	}
	if agent != want.DBHash {
		t.Fatalf("%s: agent database hash %s, tau2's %s", when, agent, want.DBHash)
	}
	wantUser := ""
	if want.UserDBHash != nil {
		wantUser = *want.UserDBHash
	}
	if user != wantUser {
		t.Fatalf("%s: user database hash %s, tau2's %s", when, user, wantUser)
	}
}

func clip(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}

// CheckTools checks that the toolkit offers exactly the recorded tools, in
// order, each a Func of the same type and mutates_state.
func CheckTools(t *testing.T, tk domain.Toolkit) {
	t.Helper()
	schemas := tk.Tools()
	if len(schemas) == 0 {
		t.Fatalf("%s offers no tools", tk.Class())
	}
	var tools []string
	for _, f := range tk.Funcs() {
		if f.Tool {
			tools = append(tools, f.Name)
		}
	}
	if len(tools) != len(schemas) {
		t.Errorf("%s: %d tool funcs, %d recorded tools", tk.Class(), len(tools), len(schemas))
	}
	for _, s := range schemas {
		f, ok := domain.HasTool(tk, s.Name)
		if !ok {
			t.Errorf("%s: tau2's tool %s has no Go func", tk.Class(), s.Name)
			continue
		}
		if f.Type != s.Type || f.Mutates != s.Mutates {
			t.Errorf("%s.%s: type %s mutates %v, tau2's %s %v", tk.Class(), s.Name, f.Type, f.Mutates, s.Type, s.Mutates)
		}
	}
}
