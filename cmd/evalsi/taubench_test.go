package main

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/trajectory"
)

var taubenchHarness = map[string]any{"external": map[string]any{"python": "evalsi_taubench:TauBenchHarness"}}

// taubenchData is a tau2 data directory for the tests: the shared
// samples' retail and telecom, and airline's policy and tasks with the
// small database of the real schema the repository carries (airline's
// db.json is not available here).
func taubenchData(t *testing.T) string {
	t.Helper()
	samples := filepath.Join(benchdataDir(t), "tau2")
	root := t.TempDir()
	domains := filepath.Join(root, "tau2", "domains")
	for _, d := range []string{"retail", "telecom"} {
		if err := os.MkdirAll(domains, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(samples, d), filepath.Join(domains, d)); err != nil {
			t.Fatal(err)
		}
	}
	airline := filepath.Join(domains, "airline")
	if err := os.MkdirAll(airline, 0o755); err != nil {
		t.Fatal(err)
	}
	for dst, src := range map[string]string{
		"db.json":            filepath.Join("..", "..", "harness", "taubench", "airline", "testdata", "db.json"),
		"policy.md":          filepath.Join(samples, "airline", "policy.md"),
		"tasks.first10.json": filepath.Join(samples, "airline", "tasks.first10.json"),
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(airline, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

type taubenchSummary struct {
	RunID   string             `json:"run_id"`
	Errored int                `json:"errored"`
	Scores  map[string]float64 `json:"scores"` // pass^k among them
}

func runTauBench(t *testing.T, db string, s map[string]any) taubenchSummary {
	t.Helper()
	r := evalsi(t, db, "run", "-f", writeSpec(t, s), "--json")
	var out taubenchSummary
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("exit %d, no JSON summary: %v\nstdout: %s\nstderr: %s", r.code, err, r.stdout, r.stderr)
	}
	if out.Errored != 0 {
		t.Fatalf("exit %d, %d errored trial(s)\nstdout: %s\nstderr: %s", r.code, out.Errored, r.stdout, r.stderr)
	}
	return out
}

// tauVerdict is the part of a verdict's details the tests read.
type tauVerdict struct {
	Termination string   `json:"termination_reason"`
	Failed      []string `json:"failed"`
	RewardInfo  struct {
		Reward float64 `json:"reward"`
	} `json:"reward_info"`
}

func tauVerdicts(t *testing.T, db, runID string) map[string]tauVerdict {
	t.Helper()
	out := map[string]tauVerdict{}
	for id, v := range bfclVerdicts(t, db, runID) {
		var d tauVerdict
		if v == nil || json.Unmarshal([]byte(v.Details), &d) != nil {
			t.Fatalf("%s: verdict %+v is not the τ-bench harness's", id, v)
		}
		out[id] = d
	}
	return out
}

// The oracle (each task's gold actions, the user's for telecom, then the
// information the task requires said) scores 1 on every shipped task of
// every domain that imports; retail's tasks that need an LLM judge are
// refused and left out.
func TestTauBenchOracle(t *testing.T) {
	data := taubenchData(t)
	for _, tc := range []struct {
		domain string
		tasks  int
	}{{"airline", 10}, {"retail", 2}, {"telecom", 10}} {
		t.Run(tc.domain, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "evalsi.db")
			s := runTauBench(t, db, map[string]any{
				"name":       "tau-oracle-" + tc.domain,
				"dataset":    map[string]any{"uri": "taubench://" + tc.domain + "?data_dir=" + data},
				"target":     map[string]any{"agent": map[string]any{"oracle": map[string]any{}}},
				"harness":    taubenchHarness,
				"evaluators": []any{"task-success"},
			})
			vs := tauVerdicts(t, db, s.RunID)
			if len(vs) != tc.tasks {
				t.Errorf("%d verdicts, want %d", len(vs), tc.tasks)
			}
			for id, v := range vs {
				if v.RewardInfo.Reward != 1 {
					t.Errorf("%s: reward %v: %v", id, v.RewardInfo.Reward, v.Failed)
				}
			}
			if s.Scores["task-success"] != 1 {
				t.Fatalf("task-success = %v, want 1", s.Scores["task-success"])
			}
		})
	}
}

// datasets inspect counts what imports and lists each refused task with
// its reason.
func TestTauBenchInspect(t *testing.T) {
	data := taubenchData(t)
	var out, errb strings.Builder
	code := run(context.Background(), []string{"datasets", "inspect", "taubench://retail?data_dir=" + data}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, w := range []string{"2 task(s) import", "3 refused", "refused  2: ", "NL_ASSERTION"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	// Naming a refused task is an error that says why.
	db := filepath.Join(t.TempDir(), "evalsi.db")
	r := evalsi(t, db, "run", "-f", writeSpec(t, map[string]any{
		"name":    "tau-refused",
		"dataset": map[string]any{"uri": "taubench://retail?tasks=2&data_dir=" + data},
		"target":  map[string]any{"agent": map[string]any{"oracle": map[string]any{}}},
		"harness": taubenchHarness,
	}))
	if r.code == 0 || !strings.Contains(r.stderr, "natural-language assertions") {
		t.Errorf("a refused task named: exit %d, stderr %s", r.code, r.stderr)
	}
}

// scriptedCall is a scripted tool call.
func scriptedCall(name, args string) spec.ScriptReply {
	return spec.ScriptReply{ToolCalls: []spec.ScriptToolCall{{Name: name, Arguments: spec.JSON(args)}}}
}

// tauServers serves the agent's and the user's scripts on two scripted
// model servers (the agent's conversation opens with its greeting, so
// replies are picked by turn: the agent's first call is turn 1).
func tauServers(t *testing.T, agentReplies, userReplies []spec.ScriptReply) (agentAddr, userAddr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a := modelserver.New(&spec.Script{Default: append([]spec.ScriptReply{{Content: "(unused: turn 0 is the greeting)"}}, agentReplies...)}, nil)
	aa, err := a.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := modelserver.New(&spec.Script{Default: userReplies}, nil)
	ua, err := u.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return aa.String(), ua.String()
}

func tauModels(connector, agentAddr, userAddr string) (target, judge map[string]any) {
	base := func(addr string) string {
		if connector == "openai" {
			return "http://" + addr + "/v1"
		}
		return "http://" + addr
	}
	target = map[string]any{"connector": connector, "model": "agent-m", "base_url": base(agentAddr), "api_key_env": "EVALSI_TAU_TEST_KEY"}
	judge = map[string]any{"connector": connector, "model": "user-m", "base_url": base(userAddr), "api_key_env": "EVALSI_TAU_TEST_KEY"}
	return target, judge
}

// retail task 0: exchange two items of order #W2378156 (the task's gold
// actions), the user simulated by the judge.
var retailGold = []spec.ScriptReply{
	scriptedCall("find_user_id_by_name_zip", `{"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}`),
	scriptedCall("get_order_details", `{"order_id": "#W2378156"}`),
	scriptedCall("get_product_details", `{"product_id": "1656367028"}`),
	scriptedCall("get_product_details", `{"product_id": "4896585277"}`),
}

// retailExchange exchanges the order's items for the new ones.
func retailExchange(items, newItems string) spec.ScriptReply {
	return scriptedCall("exchange_delivered_order_items", `{"order_id": "#W2378156", "item_ids": `+items+`, "new_item_ids": `+newItems+`, "payment_method_id": "credit_card_9513926"}`)
}

// A retail and a telecom conversation, the scripted model server playing
// the agent and the user, through both real connectors: the right writes
// score 1 (twice: pass^2 is 1), one wrong write scores 0 and says the
// database check failed; in telecom the user toggles roaming on their own
// phone and the env assertions on the phone's state hold.
func TestTauBenchScriptedConversations(t *testing.T) {
	data := taubenchData(t)
	t.Setenv("EVALSI_TAU_TEST_KEY", "not-a-secret")
	userRetail := []spec.ScriptReply{
		{Content: "Hi, I want to exchange a keyboard and a thermostat from my order #W2378156. I'm Yusuf Rossi, zip 19122."},
		{Content: "Yes, please go ahead."},
		{Content: "Thanks, that's all. ###STOP###"},
	}
	for _, connector := range []string{"openai", "anthropic"} {
		t.Run(connector, func(t *testing.T) {
			for _, tc := range []struct {
				name, items, newItems string
				want                  float64
			}{
				{"right", `["1151293680", "4983901480"]`, `["7706410293", "7747408585"]`, 1},
				// Only the keyboard: a write that succeeds, and is wrong.
				{"wrong write", `["1151293680"]`, `["7706410293"]`, 0},
			} {
				agentReplies := append(append([]spec.ScriptReply{}, retailGold...), retailExchange(tc.items, tc.newItems),
					spec.ScriptReply{Content: "Your exchange is requested."})
				aa, ua := tauServers(t, agentReplies, userRetail)
				target, judge := tauModels(connector, aa, ua)
				db := filepath.Join(t.TempDir(), "evalsi.db")
				s := runTauBench(t, db, map[string]any{
					"name":    "tau-retail-" + connector,
					"dataset": map[string]any{"uri": "taubench://retail?tasks=0&data_dir=" + data},
					"target":  target, "judge": judge, "trials": 2,
					"harness": taubenchHarness, "evaluators": []any{"task-success"},
				})
				if s.Scores["task-success"] != tc.want {
					t.Errorf("%s: task-success %v, want %v", tc.name, s.Scores["task-success"], tc.want)
				}
				if got, ok := s.Scores["pass^2"]; !ok || got != tc.want {
					t.Errorf("%s: pass^2 = %v (%v), want %v", tc.name, got, ok, tc.want)
				}
				for id, v := range tauVerdicts(t, db, s.RunID) {
					if v.Termination != "user_stop" {
						t.Errorf("%s %s: termination %q, want user_stop", tc.name, id, v.Termination)
					}
					if tc.want == 0 && (len(v.Failed) == 0 || !strings.HasPrefix(v.Failed[0], "DB:")) {
						t.Errorf("%s %s: failed %v, want the DB check named", tc.name, id, v.Failed)
					}
				}
			}

			// Telecom: roaming is off while the user is abroad; the agent
			// asks them to turn it on, which they do on their phone.
			agentReplies := []spec.ScriptReply{{Content: "Please turn data roaming on in your phone's settings."}}
			userReplies := []spec.ScriptReply{
				{Content: "My mobile data does not work. I'm John Smith, 555-123-2002."},
				scriptedCall("toggle_roaming", `{}`),
				{Content: "It works now, thanks! ###STOP###"},
			}
			aa, ua := tauServers(t, agentReplies, userReplies)
			target, judge := tauModels(connector, aa, ua)
			db := filepath.Join(t.TempDir(), "evalsi.db")
			id := "[mobile_data_issue]user_abroad_roaming_enabled_off[PERSONA:None]"
			s := runTauBench(t, db, map[string]any{
				"name":    "tau-telecom-" + connector,
				"dataset": map[string]any{"uri": "taubench://telecom?data_dir=" + data + "&tasks=" + url.QueryEscape(id)},
				"target":  target, "judge": judge,
				"harness": taubenchHarness, "evaluators": []any{"task-success"},
			})
			if s.Scores["task-success"] != 1 {
				t.Errorf("telecom: task-success %v, want 1 (%+v)", s.Scores["task-success"], tauVerdicts(t, db, s.RunID))
			}
			// The user's tool call is in the trajectory, as the user's.
			var sawUserCall bool
			for _, e := range eventsByRecord(t, db, s.RunID)[id] {
				if e.Kind == trajectory.KindMessage && e.Message.Role == trajectory.RoleUser && len(e.Message.ToolCalls) == 1 && e.Message.ToolCalls[0].Name == "toggle_roaming" {
					sawUserCall = true
				}
			}
			if !sawUserCall {
				t.Error("the user's toggle_roaming call is not in the trajectory")
			}
		})
	}
}

// An agent that does the right airline writes but leaves out what the task
// requires it to tell the user scores 0, on that basis.
func TestTauBenchCommunicate(t *testing.T) {
	data := taubenchData(t)
	t.Setenv("EVALSI_TAU_TEST_KEY", "not-a-secret")
	raw, err := os.ReadFile(filepath.Join(data, "tau2", "domains", "airline", "tasks.first10.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tasks []struct {
		ID                 string `json:"id"`
		EvaluationCriteria struct {
			Actions []struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"actions"`
			CommunicateInfo []string `json:"communicate_info"`
		} `json:"evaluation_criteria"`
	}
	if err := json.Unmarshal(raw, &tasks); err != nil {
		t.Fatal(err)
	}
	task := tasks[3] // communicate_info ["4"]
	if task.ID != "3" || len(task.EvaluationCriteria.CommunicateInfo) == 0 {
		t.Fatalf("airline task 3 is not the one with information to communicate: %+v", task)
	}
	for _, tc := range []struct {
		name, final string
		want        float64
	}{
		{"said", "You have " + task.EvaluationCriteria.CommunicateInfo[0] + " of them.", 1},
		{"omitted", "I have looked into it.", 0},
	} {
		var agentReplies []spec.ScriptReply
		for _, a := range task.EvaluationCriteria.Actions {
			agentReplies = append(agentReplies, scriptedCall(a.Name, string(a.Arguments)))
		}
		agentReplies = append(agentReplies, spec.ScriptReply{Content: tc.final})
		aa, ua := tauServers(t, agentReplies, []spec.ScriptReply{{Content: "Hello, I have a question."}, {Content: "Thanks. ###STOP###"}})
		target, judge := tauModels("openai", aa, ua)
		db := filepath.Join(t.TempDir(), "evalsi.db")
		s := runTauBench(t, db, map[string]any{
			"name":    "tau-airline-communicate",
			"dataset": map[string]any{"uri": "taubench://airline?tasks=3&data_dir=" + data},
			"target":  target, "judge": judge,
			"harness": taubenchHarness, "evaluators": []any{"task-success"},
		})
		if s.Scores["task-success"] != tc.want {
			t.Errorf("%s: task-success %v, want %v", tc.name, s.Scores["task-success"], tc.want)
		}
		for id, v := range tauVerdicts(t, db, s.RunID) {
			if tc.want == 0 && (len(v.Failed) != 1 || !strings.HasPrefix(v.Failed[0], "COMMUNICATE:")) {
				t.Errorf("%s %s: failed %v, want only the COMMUNICATE check", tc.name, id, v.Failed)
			}
		}
	}
}

// A hostile agent's output is graded, never an infrastructure error: a
// calculate of a million nested parentheses and one of huge products are
// refused as CPython would (or bounded where it has no limit), and
// ###STOP### said together with a tool call (tau2 raises there) ends the
// conversation as an agent error with reward 0.
func TestTauBenchHostileAgent(t *testing.T) {
	data := taubenchData(t)
	t.Setenv("EVALSI_TAU_TEST_KEY", "not-a-secret")
	nest, _ := json.Marshal(map[string]string{"expression": strings.Repeat("(", 1_000_000) + "1" + strings.Repeat(")", 1_000_000)})
	product, _ := json.Marshal(map[string]string{"expression": strings.Repeat("(10**4000)*", 500) + "1"})
	agentReplies := []spec.ScriptReply{
		scriptedCall("calculate", string(nest)),
		scriptedCall("calculate", string(product)),
		{Content: "All done. ###STOP###", ToolCalls: []spec.ScriptToolCall{{Name: "get_order_details", Arguments: spec.JSON(`{"order_id": "#W2378156"}`)}}},
	}
	aa, ua := tauServers(t, agentReplies, []spec.ScriptReply{{Content: "Hi, I need help with an order."}})
	target, judge := tauModels("openai", aa, ua)
	db := filepath.Join(t.TempDir(), "evalsi.db")
	s := runTauBench(t, db, map[string]any{
		"name":    "tau-hostile",
		"dataset": map[string]any{"uri": "taubench://retail?tasks=0&data_dir=" + data},
		"target":  target, "judge": judge,
		"harness": taubenchHarness, "evaluators": []any{"task-success"},
	})
	if s.Scores["task-success"] != 0 {
		t.Errorf("task-success %v, want 0", s.Scores["task-success"])
	}
	for id, v := range tauVerdicts(t, db, s.RunID) {
		if v.Termination != "agent_error" {
			t.Errorf("%s: termination %q, want agent_error", id, v.Termination)
		}
	}
	var outputs []string
	for _, e := range eventsByRecord(t, db, s.RunID)["0"] {
		if e.Kind == trajectory.KindToolResult && e.ToolResult.Name == "calculate" {
			outputs = append(outputs, e.ToolResult.Output)
		}
	}
	if len(outputs) != 2 || !strings.Contains(outputs[0], "the expression is") && !strings.Contains(outputs[0], "too many nested parentheses") || !strings.Contains(outputs[1], "int too large") {
		t.Errorf("calculate answered %q", outputs)
	}
}
