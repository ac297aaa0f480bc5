package evaluate

import (
	"context"
	"strings"
	"testing"

	"evals.si/spec"
)

func TestOutputEvaluators(t *testing.T) {
	tests := []struct {
		name     string
		cfg      spec.Evaluator
		expected any // nil: the record has no expected value
		output   string
		want     float64
		wantErr  string
	}{
		{"exact match", spec.Evaluator{Name: ExactMatch}, "Paris", "Paris", 1, ""},
		{"exact match trims whitespace", spec.Evaluator{Name: ExactMatch}, "Paris", "  Paris\n", 1, ""},
		{"exact match is case sensitive", spec.Evaluator{Name: ExactMatch}, "Paris", "paris", 0, ""},
		{"exact match ignore_case", spec.Evaluator{Name: ExactMatch, IgnoreCase: true}, "Paris", "PARIS", 1, ""},
		{"exact match differs", spec.Evaluator{Name: ExactMatch}, "Paris", "Paris, France", 0, ""},
		{"exact match non-string expected", spec.Evaluator{Name: ExactMatch}, 42, "42", 1, ""},
		{"exact match empty expected string", spec.Evaluator{Name: ExactMatch}, "", "  ", 1, ""},
		{"exact match without expected", spec.Evaluator{Name: ExactMatch}, nil, "x", 0, `record "r1" has no ` + "`expected`"},

		{"includes", spec.Evaluator{Name: Includes}, "Paris", "It is Paris.", 1, ""},
		{"includes missing", spec.Evaluator{Name: Includes}, "Paris", "It is Lyon.", 0, ""},
		{"includes ignore_case", spec.Evaluator{Name: Includes, IgnoreCase: true}, "PARIS", "it is paris", 1, ""},
		{"includes list all present", spec.Evaluator{Name: Includes}, []string{"red", "blue"}, "blue and red", 1, ""},
		{"includes list one missing", spec.Evaluator{Name: Includes}, []string{"red", "green"}, "blue and red", 0, ""},
		{"includes empty list", spec.Evaluator{Name: Includes}, []string{}, "x", 0, "empty list"},
		{"includes without expected", spec.Evaluator{Name: Includes}, nil, "x", 0, "has no `expected`"},

		{"regex from pattern", spec.Evaluator{Name: Regex, Pattern: `^\d{3}-\d{4}$`}, nil, "555-1234", 1, ""},
		{"regex from pattern no match", spec.Evaluator{Name: Regex, Pattern: `^\d{3}-\d{4}$`}, nil, "555-12345", 0, ""},
		{"regex searches anywhere", spec.Evaluator{Name: Regex, Pattern: `answer: \d+`}, nil, "so the answer: 42.", 1, ""},
		{"regex from expected", spec.Evaluator{Name: Regex}, `(?i)^yes\b`, "Yes, indeed", 1, ""},
		{"regex bad expected pattern", spec.Evaluator{Name: Regex}, `a(b`, "ab", 0, "not a valid Go (RE2) regular expression"},
		{"regex without pattern or expected", spec.Evaluator{Name: Regex}, nil, "x", 0, "or set the evaluator's `pattern`"},

		{"json valid object", spec.Evaluator{Name: JSONValid}, nil, `{"a": [1, 2]}`, 1, ""},
		{"json valid scalar", spec.Evaluator{Name: JSONValid}, nil, ` 3.5 `, 1, ""},
		{"json fenced", spec.Evaluator{Name: JSONValid}, nil, "```json\n{\"a\": 1}\n```", 1, ""},
		{"json fenced without tag", spec.Evaluator{Name: JSONValid}, nil, "```\n[1]\n```", 1, ""},
		{"json fenced other language", spec.Evaluator{Name: JSONValid}, nil, "```python\n[1]\n```", 0, ""},
		{"json in prose", spec.Evaluator{Name: JSONValid}, nil, "Here: {\"a\": 1}", 0, ""},
		{"json truncated", spec.Evaluator{Name: JSONValid}, nil, `{"a": `, 0, ""},
		{"json empty", spec.Evaluator{Name: JSONValid}, nil, "", 0, ""},
		{"json two values", spec.Evaluator{Name: JSONValid}, nil, `{} {}`, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := New(tt.cfg, nil)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if ev.Name() != tt.cfg.Name {
				t.Errorf("Name() = %q, want %q", ev.Name(), tt.cfg.Name)
			}
			scores, err := ev.Evaluate(context.Background(), Trial{Record: record("r1", "q", tt.expected), Output: tt.output})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Evaluate: %v", err)
			}
			if len(scores) != 1 || scores[0].Name != tt.cfg.Name {
				t.Fatalf("scores = %+v, want one score named %q", scores, tt.cfg.Name)
			}
			if scores[0].Value != tt.want {
				t.Errorf("%s = %v, want %v", tt.cfg.Name, scores[0].Value, tt.want)
			}
		})
	}
}

func TestIncludesReportsMissing(t *testing.T) {
	ev, _ := New(spec.Evaluator{Name: Includes}, nil)
	scores, err := ev.Evaluate(context.Background(), Trial{Record: record("r", "q", []string{"red", "green"}), Output: "red"})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(scores[0].Details); got != `{"missing":["green"]}` {
		t.Errorf("details = %s", got)
	}
}

func TestNew(t *testing.T) {
	judge := &fakeJudge{replies: []string{`{"score": 1}`}}
	tests := []struct {
		name    string
		cfg     spec.Evaluator
		judge   bool
		wantErr string
	}{
		{"unknown", spec.Evaluator{Name: "exact_match"}, false, `unknown evaluator "exact_match": use one of agent-efficiency, code-quality`},
		{"judge missing llm-judge", spec.Evaluator{Name: LLMJudge}, false, "set `judge` in the spec (connector and model) or pass --judge-provider and --judge-model"},
		{"judge missing code-quality", spec.Evaluator{Name: CodeQuality}, false, `evaluator "code-quality" needs a judge model`},
		{"judge missing goal-completion", spec.Evaluator{Name: GoalCompletion}, false, `evaluator "goal-completion" needs a judge model`},
		{"bad regex", spec.Evaluator{Name: Regex, Pattern: "("}, false, `evaluator "regex": pattern "(" is not a valid`},
		{"threshold out of range", spec.Evaluator{Name: LLMJudge, Threshold: ptr(4.0)}, true, "threshold 4 is outside 0..1"},
		{"goal threshold out of range", spec.Evaluator{Name: GoalCompletion, Threshold: ptr(-0.1)}, true, "outside 0..1"},
		{"unknown weight", spec.Evaluator{Name: CodeQuality, Weights: map[string]float64{"style": 2}}, true, `unknown dimension "style": use correctness, regression_safety`},
		{"negative weight", spec.Evaluator{Name: CodeQuality, Weights: map[string]float64{"tests": -1}}, true, "must not be negative"},
		{"zero weights", spec.Evaluator{Name: CodeQuality, Weights: map[string]float64{"correctness": 0, "regression_safety": 0, "cleanliness": 0, "tests": 0, "scope": 0, "maintainability": 0}}, true, "every dimension has weight 0"},
		{"merge bar", spec.Evaluator{Name: CodeQuality, MergeBar: ptr(6.0)}, true, "merge_bar 6 is outside 1..5"},
		{"max diff chars", spec.Evaluator{Name: CodeQuality, MaxDiffChars: -5}, true, "max_diff_chars -5"},
		{"mode", spec.Evaluator{Name: TrajectoryMatch, Mode: "strict"}, false, `mode "strict": use exact, in-order`},
		{"max repeats", spec.Evaluator{Name: Loops, MaxRepeats: -1}, false, "max_repeats -1 must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var j *fakeJudge
			if tt.judge {
				j = judge
			}
			var err error
			if j != nil {
				_, err = New(tt.cfg, j)
			} else {
				_, err = New(tt.cfg, nil)
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	// Every catalogued evaluator builds with defaults and names itself.
	for _, name := range Names() {
		ev, err := New(spec.Evaluator{Name: name}, judge)
		if err != nil {
			t.Errorf("New(%q): %v", name, err)
			continue
		}
		if ev.Name() != name {
			t.Errorf("New(%q).Name() = %q", name, ev.Name())
		}
		if len(ScoreNames(name)) == 0 {
			t.Errorf("ScoreNames(%q) is empty", name)
		}
		if !Known(name) {
			t.Errorf("Known(%q) = false", name)
		}
	}
	if Known("nope") || ScoreNames("nope") != nil || NeedsJudge("nope") {
		t.Error("an unknown evaluator is reported as known")
	}
	if !NeedsJudge(CodeQuality) || NeedsJudge(TaskSuccess) {
		t.Error("NeedsJudge is wrong for code-quality or task-success")
	}
}
