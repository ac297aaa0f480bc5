package evaluate

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"evals.si/spec"
)

// review builds a judge reply with the given scores per dimension.
func review(scores ...int) string {
	dims := reviewDimensions()
	parts := make([]string, len(scores))
	for i, s := range scores {
		parts[i] = fmt.Sprintf(`%q: {"score": %d, "reason": "because %d"}`, dims[i], s, i)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

const calcDiff = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"

func TestCodeQuality(t *testing.T) {
	tests := []struct {
		name          string
		cfg           spec.Evaluator
		replies       []string
		quality       float64
		mergeable     float64
		calls         int
		wantErr       string
		wantRetryNote string
	}{
		{"all fives", spec.Evaluator{}, []string{review(5, 5, 5, 5, 5, 5)}, 5, 1, 1, "", ""},
		{"equal weights mean", spec.Evaluator{}, []string{review(5, 4, 4, 3, 5, 3)}, 4, 0, 1, "", ""},
		{"merge bar 3", spec.Evaluator{MergeBar: ptr(3.0)}, []string{review(5, 4, 4, 3, 5, 3)}, 4, 1, 1, "", ""},
		{"weights", spec.Evaluator{Weights: map[string]float64{"correctness": 3, "tests": 0}}, []string{review(5, 4, 4, 1, 5, 2)},
			(5*3 + 4 + 4 + 5 + 2) / 7.0, 0, 1, "", ""},
		{"lenient form", spec.Evaluator{}, []string{"Review:\n```json\n{\"dimensions\": {\"Correctness\": 4, \"regression safety\": {\"score\": \"4\", \"reasoning\": \"fine\"}, \"cleanliness\": 4, \"tests\": 4, \"scope\": 4, \"maintainability\": 4}}\n```"}, 4, 1, 1, "", ""},
		{"missing dimension then valid", spec.Evaluator{}, []string{review(4, 4, 4, 4, 4), review(4, 4, 4, 4, 4, 4)}, 4, 1, 2, "", `dimension "maintainability" is missing`},
		{"out of range then valid", spec.Evaluator{}, []string{review(0, 4, 4, 4, 4, 9), "not json", review(3, 3, 3, 3, 3, 3)}, 3, 0, 3, "",
			`dimension "correctness": score 0 is outside 1..5; dimension "maintainability": score 9 is outside 1..5`},
		{"permanently invalid", spec.Evaluator{}, []string{"LGTM!"}, 0, 0, 3, `code-quality: the judge gave no usable reply for record "fix-calc" in 3 attempts`, ""},
		{"score missing in object", spec.Evaluator{}, []string{`{"correctness": {"reason": "x"}}`}, 0, 0, 3, `dimension "correctness" has no \"score\"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			judge := &fakeJudge{replies: tt.replies}
			cfg := tt.cfg
			cfg.Name = CodeQuality
			ev, err := New(cfg, judge)
			if err != nil {
				t.Fatal(err)
			}
			scores, err := ev.Evaluate(context.Background(), Trial{Record: record("fix-calc", "Fix calc.py", nil), Diff: calcDiff, HasDiff: true, Agent: true})
			if judge.calls() != tt.calls {
				t.Errorf("judge called %d times, want %d", judge.calls(), tt.calls)
			}
			if tt.wantRetryNote != "" && !strings.Contains(judge.reqs[1].Messages[2].Content, tt.wantRetryNote) {
				t.Errorf("retry note = %q, want it to contain %q", judge.reqs[1].Messages[2].Content, tt.wantRetryNote)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), strings.ReplaceAll(tt.wantErr, `\"`, `"`)) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := scoreMap(scores)
			if math.Abs(got["code-quality"]-tt.quality) > 1e-9 || got["mergeable"] != tt.mergeable || len(got) != 2 {
				t.Errorf("scores = %v, want code-quality %v mergeable %v", got, tt.quality, tt.mergeable)
			}
			var d struct {
				Dimensions []dimensionScore `json:"dimensions"`
				MergeBar   float64          `json:"merge_bar"`
			}
			if err := json.Unmarshal(scores[0].Details, &d); err != nil {
				t.Fatal(err)
			}
			if len(d.Dimensions) != 6 || d.Dimensions[0].Name != "correctness" || d.MergeBar == 0 {
				t.Errorf("details = %s", scores[0].Details)
			}
		})
	}
}

func TestCodeQualityPrompt(t *testing.T) {
	judge := &fakeJudge{replies: []string{review(4, 4, 4, 4, 4, 4)}}
	ev, _ := New(spec.Evaluator{Name: CodeQuality}, judge)
	if _, err := ev.Evaluate(context.Background(), Trial{Record: record("fix-calc", "Fix the bugs in calc.py", nil), Diff: calcDiff, HasDiff: true}); err != nil {
		t.Fatal(err)
	}
	req := judge.reqs[0]
	user := req.Messages[0].Content
	if !strings.HasPrefix(user, "Evaluator: code-quality\n") || !strings.Contains(user, "Fix the bugs in calc.py") || !strings.Contains(user, "+    return a + b") {
		t.Errorf("prompt:\n%s", user)
	}
	if strings.Contains(user, "cut") {
		t.Error("a short diff is marked as cut")
	}
	for _, d := range reviewDimensions() {
		if !strings.Contains(req.System, d) {
			t.Errorf("system prompt does not name dimension %s", d)
		}
	}
}

func TestCodeQualityCutsLongDiffs(t *testing.T) {
	judge := &fakeJudge{replies: []string{review(4, 4, 4, 4, 4, 4)}}
	ev, _ := New(spec.Evaluator{Name: CodeQuality, MaxDiffChars: 1000}, judge)
	var b strings.Builder
	for i := 0; b.Len() < 5000; i++ {
		fmt.Fprintf(&b, "+line %d ünïcödé\n", i)
	}
	scores, err := ev.Evaluate(context.Background(), Trial{Record: record("r", "task", nil), Diff: b.String(), HasDiff: true})
	if err != nil {
		t.Fatal(err)
	}
	user := judge.reqs[0].Messages[0].Content
	total := utf8.RuneCountInString(b.String())
	if !strings.Contains(user, "characters are cut") || !strings.Contains(user, fmt.Sprintf("of %d characters not shown]", total)) {
		t.Errorf("prompt does not say the diff was cut:\n%s", user[:300])
	}
	if len(user) > 2500 {
		t.Errorf("prompt is %d bytes; the diff was not cut to 1000 characters", len(user))
	}
	var d struct {
		Cut int `json:"diff_cut_chars"`
	}
	if err := json.Unmarshal(scores[0].Details, &d); err != nil || d.Cut <= total-1000 {
		t.Errorf("details = %s, want diff_cut_chars > %d", scores[0].Details, total-1000)
	}
}

func TestCutDiff(t *testing.T) {
	diff := strings.Repeat("abcdefghi\n", 10) // 100 characters
	if got, cut := cutDiff(diff, 100); got != diff || cut != 0 {
		t.Errorf("a diff at the bound was cut")
	}
	got, cut := cutDiff(diff, 45)
	if cut != 60 || !strings.HasPrefix(got, strings.Repeat("abcdefghi\n", 4)+"\n[diff cut: 60 of 100 characters not shown]") {
		t.Errorf("cutDiff = %q, %d; want it to end at the last line break", got, cut)
	}
	// Multi-byte characters count as one each.
	wide := strings.Repeat("é", 50)
	if got, cut := cutDiff(wide, 50); got != wide || cut != 0 {
		t.Errorf("50 two-byte characters cut at a 50-character bound: %d", cut)
	}
	if got, cut := cutDiff(wide, 20); cut != 30 || !strings.HasPrefix(got, strings.Repeat("é", 20)+"\n") {
		t.Errorf("cutDiff(wide) = %q, %d", got, cut)
	}
}

func TestCodeQualityNoDiff(t *testing.T) {
	judge := &fakeJudge{replies: []string{review(5, 5, 5, 5, 5, 5)}}
	ev, _ := New(spec.Evaluator{Name: CodeQuality}, judge)

	scores, err := ev.Evaluate(context.Background(), Trial{Record: record("r", "task", nil), HasDiff: true, Diff: " \n"})
	if err != nil {
		t.Fatal(err)
	}
	if got := scoreMap(scores); got["code-quality"] != 1 || got["mergeable"] != 0 {
		t.Errorf("empty diff scores = %v, want code-quality 1, mergeable 0", got)
	}
	if !strings.Contains(string(scores[0].Details), `"empty_diff":true`) {
		t.Errorf("details = %s", scores[0].Details)
	}
	if judge.calls() != 0 {
		t.Error("the judge was asked to review an empty diff")
	}

	_, err = ev.Evaluate(context.Background(), Trial{Record: record("r2", "task", nil)})
	if err == nil || !strings.Contains(err.Error(), `record "r2": no diff was recorded`) || !strings.Contains(err.Error(), "git repository") {
		t.Errorf("error = %v", err)
	}
}
