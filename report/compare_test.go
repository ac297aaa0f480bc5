package report

import (
	"bytes"
	"strings"
	"testing"

	"evals.si/store"
)

// detail builds a run from trials given as record → per-trial scores; a nil
// score map is an errored trial.
func detail(id string, recs map[string][]map[string]float64) RunDetail {
	d := RunDetail{Run: store.Run{ID: id, Name: id, Status: store.RunCompleted}, Scores: map[string][]store.Score{}}
	for rec, trials := range recs {
		for i, scores := range trials {
			t := store.Trial{ID: id + "-" + rec + "-" + string(rune('0'+i)), RecordID: rec, Trial: i, Status: store.TrialFinished}
			if scores == nil {
				t.Status = store.TrialErrored
			}
			for n, v := range scores {
				d.Scores[t.ID] = append(d.Scores[t.ID], store.Score{Name: n, Value: v})
			}
			d.Trials = append(d.Trials, t)
		}
	}
	return d
}

func TestCompareVerdicts(t *testing.T) {
	cases := []struct {
		name      string
		base      []map[string]float64
		head      []map[string]float64
		want      string
		decidedBy string
	}{
		{"pass score drops", []map[string]float64{{"task-success": 1, "code-quality": 0.5}}, []map[string]float64{{"task-success": 0, "code-quality": 0.9}}, Regressed, "task-success"},
		{"pass score rises", []map[string]float64{{"task-success": 0}}, []map[string]float64{{"task-success": 1}}, Improved, "task-success"},
		{"pass score equal decides over others", []map[string]float64{{"task-success": 1, "code-quality": 0.9}}, []map[string]float64{{"task-success": 1, "code-quality": 0.2}}, Unchanged, ""},
		{"mean over trials", []map[string]float64{{"task-success": 1}, {"task-success": 1}}, []map[string]float64{{"task-success": 1}, {"task-success": 0}}, Regressed, "task-success"},
		{"errored trials left out", []map[string]float64{{"task-success": 1}}, []map[string]float64{{"task-success": 1}, nil}, Unchanged, ""},
		{"all errored", []map[string]float64{{"task-success": 1}}, []map[string]float64{nil}, Incomparable, ""},
		{"no pass score: any drop regresses", []map[string]float64{{"exact-match": 1, "includes": 0}}, []map[string]float64{{"exact-match": 0, "includes": 1}}, Regressed, "exact-match"},
		{"no pass score: rise improves", []map[string]float64{{"exact-match": 0}}, []map[string]float64{{"exact-match": 1}}, Improved, "exact-match"},
		{"lower is better", []map[string]float64{{"policy-events": 0}}, []map[string]float64{{"policy-events": 2}}, Regressed, "policy-events"},
		{"efficiency never decides", []map[string]float64{{"agent-steps": 3, "exact-match": 1}}, []map[string]float64{{"agent-steps": 9, "exact-match": 1}}, Unchanged, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmp := Compare(detail("a", map[string][]map[string]float64{"r": c.base}), detail("b", map[string][]map[string]float64{"r": c.head}), CompareOptions{})
			if len(cmp.Records) != 1 {
				t.Fatalf("records = %+v", cmp.Records)
			}
			r := cmp.Records[0]
			if r.Verdict != c.want || strings.Join(r.DecidedBy, ",") != c.decidedBy {
				t.Errorf("verdict %s by %v, want %s by %q; scores %+v", r.Verdict, r.DecidedBy, c.want, c.decidedBy, r.Scores)
			}
			if cmp.Counts[c.want] != 1 {
				t.Errorf("counts = %v", cmp.Counts)
			}
		})
	}
}

func TestCompareAddedRemovedAndTable(t *testing.T) {
	base := detail("a", map[string][]map[string]float64{"both": {{"task-success": 1}}, "old": {{"task-success": 1}}})
	head := detail("b", map[string][]map[string]float64{"both": {{"task-success": 0}}, "new": {{"task-success": 1}}})
	c := Compare(base, head, CompareOptions{})
	got := map[string]string{}
	for _, r := range c.Records {
		got[r.RecordID] = r.Verdict
	}
	want := map[string]string{"both": Regressed, "old": Removed, "new": Added}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("record %s: %s, want %s", k, got[k], v)
		}
	}
	if len(c.Scores) != 1 || *c.Scores[0].Base != 1 || *c.Scores[0].Head != 0.5 || *c.Scores[0].Delta != -0.5 {
		t.Errorf("run-level scores: %+v", c.Scores)
	}
	var buf bytes.Buffer
	if err := WriteComparison(&buf, c, false); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"both", "regressed", "task-success", "-1.000", "regressed=1 added=1 removed=1"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, buf.String())
		}
	}
}
