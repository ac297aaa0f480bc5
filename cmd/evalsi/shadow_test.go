package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/report"
)

// candidate is capitals-offline with other scripted answers: japan now
// wrong, peru and kenya right. Its own evaluators (includes only) must be
// replaced by the baseline's (exact-match and includes).
const candidate = `name: capitals-candidate
%s
target:
  connector: scripted
  model: scripted-capitals-v2
  script:
    records:
      france: [{content: "Paris"}]
      japan: [{content: "Kyoto"}]
      peru: [{content: "Lima"}]
      kenya: [{content: "Nairobi"}]
evaluators: [includes]
`

func writeCandidate(t *testing.T, dataset string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "candidate.yaml")
	if err := os.WriteFile(p, []byte(strings.Replace(candidate, "%s", dataset, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestShadowCommand replays capitals-offline's recorded inputs against a
// candidate with different answers and checks the comparison: the same text
// as `runs compare BASELINE SHADOW`, the changed records, and the
// baseline's evaluators.
func TestShadowCommand(t *testing.T) {
	db := filepath.Join(t.TempDir(), "evalsi.db")
	r := evalsi(t, db, "run", "-f", "../../examples/capitals-offline.yaml", "--json")
	if r.code != 0 {
		t.Fatalf("baseline run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	base := r.json.RunID

	// The baseline named by the candidate's dataset: {run}.
	cand := writeCandidate(t, "dataset: {run: {run_id: "+base+"}}")
	r = evalsiStore(db, "shadow", "-f", cand)
	if r.code != 0 {
		t.Fatalf("shadow: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "base "+base) {
		t.Fatalf("shadow output does not compare with the baseline:\n%s", r.stdout)
	}
	// The shadow run is the head of the comparison: compare it again.
	var head string
	for _, line := range strings.Split(r.stdout, "\n") {
		if rest, ok := strings.CutPrefix(line, "head "); ok {
			head, _, _ = strings.Cut(rest, " ")
		}
	}
	again := evalsi(t, db, "runs", "compare", base, head)
	if again.code != 0 || again.stdout != r.stdout {
		t.Errorf("shadow output differs from runs compare %s %s:\n%s\n---\n%s", base, head, r.stdout, again.stdout)
	}
	for _, want := range []string{"japan   regressed", "kenya   improved", "peru    improved", "exact-match"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("shadow output lacks %q:\n%s", want, r.stdout)
		}
	}

	// --baseline wins over the candidate's own dataset; --json is the
	// comparison as runs compare --json gives it.
	cand = writeCandidate(t, "dataset: {records: [{id: other, input: hi}]}")
	r = evalsiStore(db, "shadow", "-f", cand, "--baseline", base[:len(base)-2], "--json")
	if r.code != 0 {
		t.Fatalf("shadow --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var c report.Comparison
	if err := json.Unmarshal([]byte(r.stdout), &c); err != nil {
		t.Fatalf("shadow --json: %v\n%s", err, r.stdout)
	}
	verdicts := map[string]string{}
	for _, rc := range c.Records {
		verdicts[rc.RecordID] = rc.Verdict
	}
	if c.Base.ID != base || c.Head.ID == base || len(c.Records) != 4 || verdicts["japan"] != report.Regressed ||
		verdicts["peru"] != report.Improved || verdicts["kenya"] != report.Improved || verdicts["france"] != report.Unchanged {
		t.Errorf("shadow --json: base %s head %s verdicts %v", c.Base.ID, c.Head.ID, verdicts)
	}
	scored := map[string]bool{}
	for _, s := range c.Scores {
		scored[s.Name] = s.Head != nil
	}
	if !scored["exact-match"] || !scored["includes"] {
		t.Errorf("the shadow run was not scored with the baseline's evaluators: %+v", c.Scores)
	}

	if r = evalsiStore(db, "shadow", "-f", cand, "--baseline", base, "--fail-on-regression"); r.code != exitFailUnder {
		t.Errorf("shadow --fail-on-regression: exit %d\n%s", r.code, r.stderr)
	}
	// A shadow trial that errors: the comparison is printed, kenya is
	// incomparable, and the exit code says a trial errored.
	noKenya := filepath.Join(t.TempDir(), "no-kenya.yaml")
	b, _ := os.ReadFile(cand)
	os.WriteFile(noKenya, []byte(strings.Replace(string(b), `      kenya: [{content: "Nairobi"}]`, "", 1)+"retries: 0\n"), 0o644)
	if r = evalsiStore(db, "shadow", noKenya, "--baseline", base, "--fail-on-regression"); r.code != exitErrored ||
		!strings.Contains(r.stdout, "kenya   incomparable") || !strings.Contains(r.stderr, "1 trial(s) of shadow run") {
		t.Errorf("shadow with an errored trial: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = evalsiStore(db, "shadow", "-f", cand); r.code != exitUsage || !strings.Contains(r.stderr, "--baseline") {
		t.Errorf("shadow without a baseline: exit %d %s", r.code, r.stderr)
	}
	if r = evalsiStore(db, "shadow", "-f", cand, "--baseline", "r-nope"); r.code != exitUsage || !strings.Contains(r.stderr, "not found") {
		t.Errorf("shadow of a missing baseline: exit %d %s", r.code, r.stderr)
	}
}
