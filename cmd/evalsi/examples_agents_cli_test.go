package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/modelserver"
	"evals.si/store"
	"evals.si/trajectory"
)

// The Claude Code and Codex demos (examples/agents/claude-code-offline.yaml,
// codex-offline.yaml) run as shipped, with the real CLIs from npm inside a
// bwrap sandbox: the scripted model server runs in process on loopback with
// the example's script, and only its address and the npm directory are
// rewritten. Each agent must fix calc.py with its own tools (the checker
// grades the end state), reach nothing but the model server (no refused
// egress: telemetry and plugins are off), and leave a trajectory parsed into
// tool calls with token usage.
func TestCLIAgentDemos(t *testing.T) {
	requireBwrap(t)
	cases := []struct {
		name, example, script, pkg string
		// keyVar is the worker variable env_from maps to the agent's key;
		// keyHeader is where the agent sends it.
		keyVar, keyHeader, path string
		checkTools              func(t *testing.T, calls []trajectory.ToolCall)
	}{
		{
			name: "claude-code", example: "claude-code-offline.yaml", script: "claude-code.yaml",
			pkg: "@anthropic-ai/claude-code", keyVar: "AGENT_ANTHROPIC_KEY", keyHeader: "X-Api-Key", path: "/v1/messages",
			checkTools: func(t *testing.T, calls []trajectory.ToolCall) {
				// Claude Code's own tools, as the script names them.
				var names []string
				for _, c := range calls {
					names = append(names, c.Name)
				}
				if got := strings.Join(names, ","); got != "Read,Bash,Edit,Edit,Bash" {
					t.Errorf("tool calls = %s, want Read,Bash,Edit,Edit,Bash", got)
				}
			},
		},
		{
			name: "codex", example: "codex-offline.yaml", script: "codex.yaml",
			pkg: "@openai/codex", keyVar: "AGENT_OPENAI_KEY", keyHeader: "Authorization", path: "/v1/responses",
			checkTools: func(t *testing.T, calls []trajectory.ToolCall) {
				// Codex reports items, not tool names: two commands and the
				// patch it applied (intercepted from exec_command).
				if len(calls) != 3 {
					t.Fatalf("%d tool calls, want 3 (command, file change, command): %+v", len(calls), calls)
				}
				for i, want := range []string{"pytest", "calc.py", "pytest"} {
					if !strings.Contains(string(calls[i].Arguments), want) {
						t.Errorf("tool call %d (%s) = %s, want it to mention %s", i, calls[i].Name, calls[i].Arguments, want)
					}
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			npm := testenv.NodeModules(t, tc.pkg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			script, err := modelserver.LoadScript(filepath.Join("../../examples/agents/model-server", tc.script))
			if err != nil {
				t.Fatal(err)
			}
			srv := modelserver.New(script, nil)
			addr, err := srv.Listen(ctx, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}

			src, err := os.ReadFile(filepath.Join("../../examples/agents", tc.example))
			if err != nil {
				t.Fatal(err)
			}
			y := string(src)
			for old, repl := range map[string]string{"127.0.0.1:8089": addr.String(), "/usr/local/lib/evalsi/npm": npm} {
				if !strings.Contains(y, old) {
					t.Fatalf("%s no longer names %s; update this test", tc.example, old)
				}
				y = strings.ReplaceAll(y, old, repl)
			}
			dir := t.TempDir()
			path := filepath.Join(dir, tc.example)
			if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
				t.Fatal(err)
			}
			// A distinctive dummy: the scripted server takes any key, and the
			// agent must redact the value from everything it records.
			key := "offline-dummy-key-" + tc.name
			t.Setenv(tc.keyVar, key)

			db := filepath.Join(dir, "evalsi.db")
			r := evalsi(t, db, "run", "-f", path, "--json")
			if r.code != 0 || r.json.Errored != 0 {
				t.Fatalf("exit %d, %d errored (the CLI under %s must be visible in a no-image bwrap sandbox; see docs/cli-demos.md); stderr:\n%s", r.code, r.json.Errored, npm, r.stderr)
			}
			for metric, want := range map[string]float64{"task-success": 1, "policy-clean": 1} {
				if got, ok := r.json.Scores[metric]; !ok || got != want {
					t.Errorf("%s = %v (present %v), want %v; scores %v\nstderr:\n%s", metric, got, ok, want, r.json.Scores, r.stderr)
				}
			}

			reqs := srv.Requests()
			if len(reqs) < 4 {
				t.Errorf("the model server got %d requests, want one per scripted turn (4)", len(reqs))
			}
			for _, q := range reqs {
				if q.Method != http.MethodPost || q.Path != tc.path {
					t.Errorf("unexpected request %s %s", q.Method, q.Path)
				}
				if q.Header.Get(tc.keyHeader) != "REDACTED" {
					t.Errorf("%s %s carried no %s: env_from did not reach the agent", q.Method, q.Path, tc.keyHeader)
				}
			}

			st, err := store.Open(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			trials, err := st.ListTrials(ctx, r.json.RunID)
			if err != nil || len(trials) != 1 {
				t.Fatalf("trials: %v %v", trials, err)
			}
			events, err := st.Events(ctx, trials[0].ID, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var (
				calls  []trajectory.ToolCall
				usage  trajectory.Usage
				models int
			)
			for _, e := range events {
				b, _ := json.Marshal(e)
				if strings.Contains(string(b), key) {
					t.Errorf("event %d holds the agent's key: %s", e.Seq, b)
				}
				switch e.Kind {
				case trajectory.KindToolCall:
					calls = append(calls, *e.ToolCall)
				case trajectory.KindModelCall:
					models++
					usage = usage.Add(e.ModelCall.Usage)
				}
			}
			if models == 0 || usage.InputTokens == 0 || usage.OutputTokens == 0 {
				t.Errorf("%d model calls with usage %+v: the trajectory has no token counts", models, usage)
			}
			tc.checkTools(t, calls)
		})
	}
}
