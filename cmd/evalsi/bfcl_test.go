package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// bfclCategories are the categories the importer and the adapter support,
// each shipped with 5 sample entries.
var bfclCategories = []string{
	"simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
	"irrelevance", "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
	"live_irrelevance", "live_relevance",
	"multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context",
}

// requireBFCL points the worker at the bfcl adapter's environment
// (scripts/python-adapters.sh makes it) and returns the samples' directory.
func requireBFCL(t *testing.T) string {
	t.Helper()
	adapters, err := filepath.Abs(filepath.Join("..", "..", "python", "adapters"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(adapters, "bfcl", ".venv", "bin", "python")); err != nil {
		testenv.Missing(t, "bfcl adapter", "python/adapters/bfcl/.venv is not installed (bash scripts/python-adapters.sh)")
	}
	t.Setenv("EVALSI_PYTHON_ADAPTERS", adapters)
	return filepath.Join(benchdataDir(t), "bfcl")
}

// writeSpec writes a spec (as JSON, which YAML reads) to a temporary file.
func writeSpec(t *testing.T, s map[string]any) string {
	t.Helper()
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "bfcl.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var bfclHarness = map[string]any{"external": map[string]any{"python": "evalsi_bfcl:BFCLHarness"}}

// eventsByRecord reads every trial's events, by record id (the trials of
// one record in order).
func eventsByRecord(t *testing.T, db, runID string) map[string][]trajectory.Event {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	trials, err := st.ListTrials(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]trajectory.Event{}
	for _, tr := range trials {
		evs, err := st.Events(ctx, tr.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		out[tr.RecordID] = append(out[tr.RecordID], evs...)
	}
	return out
}

// bfclVerdicts reads each trial's verdict (the harness's Check, as the
// checker event records it) by record id.
func bfclVerdicts(t *testing.T, db, runID string) map[string]*trajectory.Checker {
	t.Helper()
	out := map[string]*trajectory.Checker{}
	for id, evs := range eventsByRecord(t, db, runID) {
		for _, e := range evs {
			if e.Kind == trajectory.KindChecker {
				out[id] = e.Checker
			}
		}
	}
	return out
}

// errorType is the error_type of BFCL's result dict in a verdict's details.
func errorType(t *testing.T, v *trajectory.Checker) string {
	t.Helper()
	if v == nil {
		return "<no verdict>"
	}
	var res struct {
		Valid     bool   `json:"valid"`
		ErrorType string `json:"error_type"`
	}
	if err := json.Unmarshal([]byte(v.Details), &res); err != nil {
		t.Fatalf("verdict details %q are not BFCL's result dict: %v", v.Details, err)
	}
	if res.Valid {
		return ""
	}
	return res.ErrorType
}

type bfclSummary struct {
	RunID      string                        `json:"run_id"`
	Errored    int                           `json:"errored"`
	Scores     map[string]float64            `json:"scores"`
	Categories map[string]map[string]float64 `json:"categories"`
}

func runBFCL(t *testing.T, db, specPath string) bfclSummary {
	t.Helper()
	r := evalsi(t, db, "run", "-f", specPath, "--json")
	var s bfclSummary
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("exit %d, no JSON summary: %v\nstdout: %s\nstderr: %s", r.code, err, r.stdout, r.stderr)
	}
	if s.Errored != 0 {
		t.Fatalf("exit %d, %d errored trial(s)\nstdout: %s\nstderr: %s", r.code, s.Errored, r.stdout, r.stderr)
	}
	return s
}

// Every shipped sample, answered by the oracle (the ground truth through
// the harness's own decode, execution and grading path), passes: BFCL's
// checker, as the adapter drives it, accepts BFCL's own answers. No sandbox
// is made for these trials.
func TestBFCLOracle(t *testing.T) {
	data := requireBFCL(t)
	for _, cat := range bfclCategories {
		t.Run(cat, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "evalsi.db")
			p := writeSpec(t, map[string]any{
				"name":       "bfcl-oracle-" + cat,
				"dataset":    map[string]any{"uri": "bfcl://" + cat + "?data_dir=" + data},
				"target":     map[string]any{"agent": map[string]any{"oracle": map[string]any{}}},
				"harness":    bfclHarness,
				"evaluators": []any{"task-success"},
			})
			s := runBFCL(t, db, p)
			if s.Scores["task-success"] != 1 {
				for id, v := range bfclVerdicts(t, db, s.RunID) {
					if v == nil || !v.Pass {
						t.Errorf("%s: verdict %+v", id, v)
					}
				}
				t.Fatalf("task-success = %v, want 1", s.Scores["task-success"])
			}
			if got := s.Categories[cat]["task-success"]; got != 1 {
				t.Errorf("categories = %v, want %s task-success 1", s.Categories, cat)
			}
			if n := len(bfclVerdicts(t, db, s.RunID)); n != 5 {
				t.Errorf("%d verdicts, want one per sample entry (5)", n)
			}
		})
	}
}

// bfclEntry reads one sample entry and its possible answer.
func bfclEntry(t *testing.T, data, cat, id string) (entry, answer json.RawMessage) {
	t.Helper()
	find := func(path string) json.RawMessage {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var head struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(sc.Bytes(), &head) == nil && head.ID == id {
				return append(json.RawMessage(nil), sc.Bytes()...)
			}
		}
		t.Fatalf("%s has no entry %s", path, id)
		return nil
	}
	entry = find(filepath.Join(data, "BFCL_v4_"+cat+".json"))
	if !strings.Contains(cat, "irrelevance") && cat != "live_relevance" {
		answer = find(filepath.Join(data, "possible_answer", "BFCL_v4_"+cat+".json"))
	}
	return entry, answer
}

// bfclRecord is an inline record carrying a sample entry, as the importer
// makes it, under an id of the test's choosing.
func bfclRecord(t *testing.T, data, id, cat, entryID string) map[string]any {
	entry, answer := bfclEntry(t, data, cat, entryID)
	b := map[string]any{"category": cat, "entry": entry}
	if answer != nil {
		b["answer"] = answer
	}
	var first struct {
		Question [][]struct{ Content string } `json:"question"`
	}
	_ = json.Unmarshal(entry, &first)
	return map[string]any{"id": id, "input": first.Question[0][0].Content,
		"metadata": map[string]any{"benchmark": "bfcl", "category": cat, "bfcl": b}}
}

type toolCall = map[string]any

func call(name string, args map[string]any) toolCall {
	return toolCall{"name": name, "arguments": args}
}

// A table of wrong answers fails with the error type BFCL's checker
// reports for each (the adapter's unit tests compare these with a direct
// call of bfcl-eval's checker side by side); the right answer and a
// string BFCL standardizes still pass.
func TestBFCLPerturbations(t *testing.T) {
	data := requireBFCL(t)
	tri := func(args map[string]any) []toolCall { return []toolCall{call("calculate_triangle_area", args)} }
	javaMap := `new HashMap<String, Object>() {{ put("limit", 50); put("schemaFilter", "public"); }}`
	cases := []struct {
		id, cat, entry string
		calls          []toolCall // nil: a text answer
		want           string     // BFCL's error_type; "" passes
	}{
		{"right", "simple_python", "simple_python_0", tri(map[string]any{"base": 10, "height": 5}), ""},
		{"standardized-string", "simple_python", "simple_python_0", tri(map[string]any{"base": 10, "height": 5, "unit": "Units"}), ""},
		{"wrong-type", "simple_python", "simple_python_0", tri(map[string]any{"base": "10", "height": 5}), "type_error:simple"},
		{"bool-for-int", "simple_python", "simple_python_0", tri(map[string]any{"base": true, "height": 5}), "type_error:simple"},
		{"extra-parameter", "simple_python", "simple_python_0", tri(map[string]any{"base": 10, "height": 5, "color": "red"}), "simple_function_checker:unexpected_param"},
		{"missing-required", "simple_python", "simple_python_0", tri(map[string]any{"base": 10}), "simple_function_checker:missing_required"},
		{"wrong-value", "simple_python", "simple_python_0", tri(map[string]any{"base": 11, "height": 5}), "value_error:others"},
		{"wrong-function-name", "simple_python", "simple_python_0", []toolCall{call("calculate_circle_area", map[string]any{"base": 10, "height": 5})}, "simple_function_checker:wrong_func_name"},
		{"wrong-count", "simple_python", "simple_python_0", append(tri(map[string]any{"base": 10, "height": 5}), tri(map[string]any{"base": 10, "height": 5})...), "simple_function_checker:wrong_count"},
		{"no-call", "simple_python", "simple_python_0", nil, "ast_decoder:decoder_failed"},
		{"reordered-list", "multiple", "multiple_3", []toolCall{call("EuclideanDistance_calculate", map[string]any{"pointA": []any{4, 3}, "pointB": []any{1, 2}})}, "value_error:list/tuple"},
		{"multiple-wrong-function", "multiple", "multiple_2", []toolCall{call("country_info_largest_city", map[string]any{"country": "Brazil"})}, "simple_function_checker:wrong_func_name"},
		// The scripted connector sends arguments with sorted keys: params
		// is checked before useShortName, as BFCL checks them in the
		// model's order.
		{"java-right", "simple_java", "simple_java_1", []toolCall{call("SQLCompletionAnalyzer_makeProposalsFromObject", map[string]any{"object": "Customers", "useShortName": "true", "params": javaMap})}, ""},
		{"java-not-a-string", "simple_java", "simple_java_1", []toolCall{call("SQLCompletionAnalyzer_makeProposalsFromObject", map[string]any{"object": "Customers", "useShortName": true, "params": javaMap})}, "type_error:java"},
		{"javascript-wrong-order", "simple_javascript", "simple_javascript_3", []toolCall{call("submitAtCoordinate", map[string]any{"action": "submit", "formId": "loginForm", "coordinates": "[30, 60]"})}, "value_error:list/tuple"},
		{"parallel-no-match", "parallel", "parallel_0", []toolCall{call("spotify_play", map[string]any{"artist": "Taylor Swift", "duration": 20}), call("spotify_play", map[string]any{"artist": "Adele", "duration": 15})}, "parallel_function_checker_no_order:cannot_find_match"},
		{"parallel-wrong-count", "parallel", "parallel_0", []toolCall{call("spotify_play", map[string]any{"artist": "Taylor Swift", "duration": 20})}, "parallel_function_checker_no_order:wrong_count"},
		{"parallel-any-order", "parallel", "parallel_0", []toolCall{call("spotify_play", map[string]any{"artist": "Maroon 5", "duration": 15}), call("spotify_play", map[string]any{"artist": "Taylor Swift", "duration": 20})}, ""},
		{"irrelevance-called", "irrelevance", "irrelevance_0", []toolCall{call("determine_body_mass_index", map[string]any{"weight": 70, "height": 1.75})}, "irrelevance_error:decoder_success"},
	}
	var records []any
	script := map[string]any{}
	for _, c := range cases {
		records = append(records, bfclRecord(t, data, c.id, c.cat, c.entry))
		reply := map[string]any{"content": "Here is my answer."}
		if c.calls != nil {
			reply = map[string]any{"tool_calls": c.calls}
		}
		script[c.id] = []any{reply}
	}
	db := filepath.Join(t.TempDir(), "evalsi.db")
	p := writeSpec(t, map[string]any{
		"name":        "bfcl-perturbations",
		"dataset":     map[string]any{"records": records},
		"target":      map[string]any{"connector": "scripted", "model": "scripted-bfcl", "script": map[string]any{"records": script}},
		"harness":     bfclHarness,
		"evaluators":  []any{"task-success"},
		"concurrency": 4,
	})
	s := runBFCL(t, db, p)
	verdicts := bfclVerdicts(t, db, s.RunID)
	for _, c := range cases {
		v := verdicts[c.id]
		if got := errorType(t, v); got != c.want {
			t.Errorf("%s: error type %q, want %q (verdict %+v)", c.id, got, c.want, v)
		}
		if v != nil && v.Pass != (c.want == "") {
			t.Errorf("%s: pass = %v with error type %q", c.id, v.Pass, c.want)
		}
	}
}

// Multi-turn: a wrong call that changes the state fails the turn with
// instance_state_mismatch; one that leaves the state alone but answers
// differently fails with execution_response_mismatch; calls the harness
// refuses (a function not offered, an argument name that is code) are tool
// errors the model sees and nothing runs.
func TestBFCLMultiTurnWrongCalls(t *testing.T) {
	data := requireBFCL(t)
	text := map[string]any{"content": "Done."}
	calls := func(cs ...toolCall) map[string]any { return map[string]any{"tool_calls": cs} }
	find := calls(call("find", map[string]any{"path": ".", "name": "test"}))
	cases := []struct {
		id      string
		replies []any
		want    string
	}{
		{"right", []any{find, text,
			calls(call("cd", map[string]any{"folder": "projects"}), call("cd", map[string]any{"folder": "photography"}),
				call("cp", map[string]any{"source": "test_image1.jpg", "destination": "backup_tests"}),
				call("cp", map[string]any{"source": "test_document.txt", "destination": "backup_tests"})), text}, ""},
		{"state", []any{find, text,
			calls(call("cd", map[string]any{"folder": "projects"}), call("cd", map[string]any{"folder": "photography"}),
				call("cp", map[string]any{"source": "test_image1.jpg", "destination": "elsewhere"})), text}, "multi_turn:instance_state_mismatch"},
		{"response", []any{calls(call("find", map[string]any{"path": ".", "name": "nothing-like-it"})), text, text, text}, "multi_turn:execution_response_mismatch"},
		{"refused", []any{
			calls(call("not_offered", map[string]any{"x": 1}), call("find", map[string]any{"path": ".", "name=__import__('os').system('touch /tmp/evalsi-bfcl-pwned'),x": "test"})),
			text, text, text}, "multi_turn:execution_response_mismatch"},
	}
	var records []any
	script := map[string]any{}
	for _, c := range cases {
		records = append(records, bfclRecord(t, data, c.id, "multi_turn_base", "multi_turn_base_3"))
		script[c.id] = c.replies
	}
	os.Remove("/tmp/evalsi-bfcl-pwned")
	db := filepath.Join(t.TempDir(), "evalsi.db")
	p := writeSpec(t, map[string]any{
		"name":       "bfcl-multi-turn",
		"dataset":    map[string]any{"records": records},
		"target":     map[string]any{"connector": "scripted", "model": "scripted-bfcl", "script": map[string]any{"records": script}},
		"harness":    bfclHarness,
		"evaluators": []any{"task-success"},
	})
	s := runBFCL(t, db, p)
	verdicts := bfclVerdicts(t, db, s.RunID)
	for _, c := range cases {
		if got := errorType(t, verdicts[c.id]); got != c.want {
			t.Errorf("%s: error type %q, want %q (verdict %+v)", c.id, got, c.want, verdicts[c.id])
		}
	}
	if _, err := os.Stat("/tmp/evalsi-bfcl-pwned"); err == nil {
		t.Error("a model's argument name ran as code in the adapter")
	}
	// The refused calls are tool errors in the trajectory.
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	trials, _ := st.ListTrials(context.Background(), s.RunID)
	refusedErrors := 0
	for _, tr := range trials {
		if tr.RecordID != "refused" {
			continue
		}
		evs, _ := st.Events(context.Background(), tr.ID, 0, 0)
		for _, e := range evs {
			if e.Kind == trajectory.KindToolResult && e.ToolResult.IsError {
				refusedErrors++
			}
		}
	}
	if refusedErrors != 2 {
		t.Errorf("%d tool errors for the two refused calls, want 2", refusedErrors)
	}
}

// A BFCL run over the scripted model server completes through the real
// OpenAI and Anthropic connectors (the SDKs on loopback), with the
// summary's scores per category: a single-turn category answered right,
// and a multi-turn entry.
func TestBFCLConnectors(t *testing.T) {
	data := requireBFCL(t)
	rules := []spec.ScriptRule{
		{Contains: "area of a triangle with a base of 10", Replies: []spec.ScriptReply{{ToolCalls: []spec.ScriptToolCall{
			{Name: "calculate_triangle_area", Arguments: spec.JSON(`{"base": 10, "height": 5, "unit": "units"}`)}}}}},
		{Contains: "factorial of 5", Replies: []spec.ScriptReply{{ToolCalls: []spec.ScriptToolCall{
			{Name: "math_factorial", Arguments: spec.JSON(`{"number": 5}`)}}}}},
		{Contains: "hypotenuse", Replies: []spec.ScriptReply{{ToolCalls: []spec.ScriptToolCall{
			{Name: "math_hypot", Arguments: spec.JSON(`{"x": 4, "y": 5}`)}}}}},
		{Contains: "a=1, b=-3, c=2", Replies: []spec.ScriptReply{{ToolCalls: []spec.ScriptToolCall{
			{Name: "algebra_quadratic_roots", Arguments: spec.JSON(`{"a": 1, "b": -3, "c": 2}`)}}}}},
		// Wrong on purpose: simple_python_4 fails, so the category's mean is 0.8.
		{Contains: "a=2, b=6, and c=5", Replies: []spec.ScriptReply{{ToolCalls: []spec.ScriptToolCall{
			{Name: "solve_quadratic_equation", Arguments: spec.JSON(`{"a": 2, "b": 6, "c": 6}`)}}}}},
		{Contains: "photography project", Replies: []spec.ScriptReply{
			{ToolCalls: []spec.ScriptToolCall{{Name: "find", Arguments: spec.JSON(`{"path": ".", "name": "test"}`)}}},
			{Content: "Found them."},
			{ToolCalls: []spec.ScriptToolCall{
				{Name: "cd", Arguments: spec.JSON(`{"folder": "projects"}`)},
				{Name: "cd", Arguments: spec.JSON(`{"folder": "photography"}`)},
				{Name: "cp", Arguments: spec.JSON(`{"source": "test_image1.jpg", "destination": "backup_tests"}`)},
				{Name: "cp", Arguments: spec.JSON(`{"source": "test_document.txt", "destination": "backup_tests"}`)}}},
			{Content: "Copied."}}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := modelserver.New(&spec.Script{Rules: rules}, nil)
	addr, err := srv.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("EVALSI_BFCL_TEST_KEY", "not-a-secret")
	for _, conn := range []struct{ name, baseURL string }{
		{"openai", "http://" + addr.String() + "/v1"},
		{"anthropic", "http://" + addr.String()},
	} {
		t.Run(conn.name, func(t *testing.T) {
			target := map[string]any{"connector": conn.name, "model": "m", "base_url": conn.baseURL, "api_key_env": "EVALSI_BFCL_TEST_KEY"}
			for _, tc := range []struct {
				uri, cat string
				want     float64
			}{
				{"bfcl://simple_python?data_dir=" + data, "simple_python", 0.8},
				{"bfcl://multi_turn_base?ids=multi_turn_base_3&data_dir=" + data, "multi_turn_base", 1},
			} {
				db := filepath.Join(t.TempDir(), "evalsi.db")
				p := writeSpec(t, map[string]any{
					"name": "bfcl-" + conn.name, "dataset": map[string]any{"uri": tc.uri},
					"target": target, "harness": bfclHarness, "evaluators": []any{"task-success"},
				})
				s := runBFCL(t, db, p)
				if got := s.Categories[tc.cat]["task-success"]; got != tc.want {
					t.Errorf("%s: categories = %v, want %s task-success %v", tc.uri, s.Categories, tc.cat, tc.want)
				}
			}
			// The model saw BFCL's tools as the connector's wire format
			// carries them: dotted names with underscores.
			var sawTool bool
			for _, r := range srv.Requests() {
				if bytes.Contains(r.Body, []byte(`"math_factorial"`)) {
					sawTool = true
				}
			}
			if !sawTool {
				t.Error("no request offered math_factorial (BFCL's math.factorial as FC models get it)")
			}
		})
	}
}

// An environment in a BFCL spec is refused, not silently ignored: the
// harness runs without a sandbox.
func TestBFCLRefusesEnvironment(t *testing.T) {
	data := requireBFCL(t)
	p := writeSpec(t, map[string]any{
		"dataset":     map[string]any{"uri": "bfcl://simple_python?ids=simple_python_0&data_dir=" + data},
		"target":      map[string]any{"agent": map[string]any{"oracle": map[string]any{}}},
		"harness":     bfclHarness,
		"environment": map[string]any{"files": map[string]any{"notes.txt": "unused"}},
	})
	r := evalsi(t, filepath.Join(t.TempDir(), "evalsi.db"), "run", "-f", p)
	if r.code == 0 || !strings.Contains(r.stderr, "without a sandbox") || !strings.Contains(r.stderr, "environment") {
		t.Fatalf("exit %d; want a refusal naming environment\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}
