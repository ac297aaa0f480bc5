package report

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"evals.si/store"
)

// Verdicts of a record in a comparison of two runs.
const (
	// Regressed: the head run does worse on the record than the base run.
	Regressed = "regressed"
	// Improved: the head run does better.
	Improved = "improved"
	// Unchanged: no deciding score moved.
	Unchanged = "unchanged"
	// Added: the record is only in the head run.
	Added = "added"
	// Removed: the record is only in the base run.
	Removed = "removed"
	// Incomparable: the record is in both runs but one side has no scored
	// trial (every trial errored or is unfinished), so there is nothing to
	// compare; errors are never scores.
	Incomparable = "incomparable"
)

// DefaultPassScore decides a record's verdict when both runs scored it.
const DefaultPassScore = "task-success"

// scoreEpsilon absorbs float noise in means: deltas smaller than it are no
// change.
const scoreEpsilon = 1e-9

// Comparison is two runs compared record by record, as `evalsi runs
// compare` prints it and the viewer shows it.
//
// How a record's verdict is decided:
//
//   - Each score of a record is the mean over that record's finished trials
//     that carry the score (errored and unfinished trials are left out), in
//     each run; the delta is head minus base.
//   - When both runs have the pass score for the record (PassScore,
//     task-success by default), its delta alone decides: below zero is
//     regressed, above zero improved, otherwise unchanged. Other scores are
//     still listed with their deltas.
//   - Otherwise every quality score present on both sides decides: the record
//     regressed when any of them got worse, improved when some got better and
//     none worse, unchanged otherwise. "Worse" is lower, except for the
//     counts where lower is better (policy-events, escalation-requests,
//     loops, loop-detected). Efficiency scores (agent-steps, agent-tokens,
//     agent-cost-usd) never decide: they vary with the model's wording more
//     than with the outcome.
//   - A record only in the head run is added, only in the base run removed; a
//     record with no scored trial on one side is incomparable.
type Comparison struct {
	Base RunRef `json:"base"`
	Head RunRef `json:"head"`
	// PassScore is the score that decides verdicts when both sides have it.
	PassScore string `json:"pass_score"`
	// Scores compares the run-level means of every score (over all scored
	// trials), sorted by name.
	Scores  []ScoreDelta       `json:"scores"`
	Records []RecordComparison `json:"records"`
	// Counts is the number of records per verdict.
	Counts map[string]int `json:"counts"`
}

// RunRef names a compared run.
type RunRef struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// RecordComparison is one record of both runs.
type RecordComparison struct {
	RecordID string `json:"record_id"`
	Verdict  string `json:"verdict"`
	// DecidedBy names the score(s) whose delta made a regressed or improved
	// verdict.
	DecidedBy []string     `json:"decided_by,omitempty"`
	Base      TrialCounts  `json:"base"`
	Head      TrialCounts  `json:"head"`
	Scores    []ScoreDelta `json:"scores"`
}

// TrialCounts counts a record's trials in one run.
type TrialCounts struct {
	Trials  int `json:"trials"`
	Scored  int `json:"scored"`
	Errored int `json:"errored"`
	// TrialIDs are the record's trials in trial order, for links.
	TrialIDs []string `json:"trial_ids,omitempty"`
}

// ScoreDelta is one score's mean in both runs. Base or Head is nil when that
// side lacks the score; Delta is set only when both have it.
type ScoreDelta struct {
	Name  string   `json:"name"`
	Base  *float64 `json:"base"`
	Head  *float64 `json:"head"`
	Delta *float64 `json:"delta"`
	// LowerIsBetter marks scores where a drop is an improvement.
	LowerIsBetter bool `json:"lower_is_better,omitempty"`
}

// CompareOptions tune Compare.
type CompareOptions struct {
	// PassScore overrides DefaultPassScore.
	PassScore string
}

// DetailStore is what LoadRunDetail reads; *store.Store has it.
type DetailStore interface {
	GetRun(ctx context.Context, id string) (store.Run, error)
	ListTrials(ctx context.Context, runID string) ([]store.Trial, error)
	Scores(ctx context.Context, runID string) (map[string][]store.Score, error)
}

// LoadRunDetail reads a run (id or unique prefix) with its trials and scores.
func LoadRunDetail(ctx context.Context, st DetailStore, id string) (RunDetail, error) {
	run, err := st.GetRun(ctx, id)
	if err != nil {
		return RunDetail{}, err
	}
	trials, err := st.ListTrials(ctx, run.ID)
	if err != nil {
		return RunDetail{}, err
	}
	scores, err := st.Scores(ctx, run.ID)
	if err != nil {
		return RunDetail{}, err
	}
	return RunDetail{Run: run, Trials: trials, Scores: scores}, nil
}

// CompareRuns loads two runs and compares head against base.
func CompareRuns(ctx context.Context, st DetailStore, baseID, headID string, opt CompareOptions) (Comparison, error) {
	base, err := LoadRunDetail(ctx, st, baseID)
	if err != nil {
		return Comparison{}, fmt.Errorf("comparing runs: base: %w", err)
	}
	head, err := LoadRunDetail(ctx, st, headID)
	if err != nil {
		return Comparison{}, fmt.Errorf("comparing runs: head: %w", err)
	}
	return Compare(base, head, opt), nil
}

// lowerIsBetter lists scores that count bad things.
func lowerIsBetter(name string) bool {
	switch name {
	case "policy-events", "escalation-requests", "loops", "loop-detected":
		return true
	}
	return efficiency(name)
}

// efficiency lists scores that are reported but never decide a verdict.
func efficiency(name string) bool {
	switch name {
	case "agent-steps", "agent-tokens", "agent-cost-usd":
		return true
	}
	return false
}

// Compare compares head against base, record by record.
func Compare(base, head RunDetail, opt CompareOptions) Comparison {
	pass := opt.PassScore
	if pass == "" {
		pass = DefaultPassScore
	}
	c := Comparison{
		Base:      RunRef{ID: base.Run.ID, Name: base.Run.Name, Status: base.Run.Status},
		Head:      RunRef{ID: head.Run.ID, Name: head.Run.Name, Status: head.Run.Status},
		PassScore: pass,
		Counts:    map[string]int{},
	}
	b, h := byRecord(base), byRecord(head)
	c.Scores = deltas(b.all, h.all)

	ids := make([]string, 0, len(b.records)+len(h.records))
	for id := range b.records {
		ids = append(ids, id)
	}
	for id := range h.records {
		if _, ok := b.records[id]; !ok {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		br, inBase := b.records[id]
		hr, inHead := h.records[id]
		rc := RecordComparison{RecordID: id}
		if inBase {
			rc.Base = br.counts
		}
		if inHead {
			rc.Head = hr.counts
		}
		var bm, hm map[string]float64
		if inBase {
			bm = br.means()
		}
		if inHead {
			hm = hr.means()
		}
		rc.Scores = deltas(bm, hm)
		switch {
		case !inBase:
			rc.Verdict = Added
		case !inHead:
			rc.Verdict = Removed
		case rc.Base.Scored == 0 || rc.Head.Scored == 0:
			rc.Verdict = Incomparable
		default:
			rc.Verdict, rc.DecidedBy = verdict(rc.Scores, pass)
		}
		c.Counts[rc.Verdict]++
		c.Records = append(c.Records, rc)
	}
	return c
}

func verdict(scores []ScoreDelta, pass string) (string, []string) {
	for _, s := range scores {
		if s.Name == pass && s.Delta != nil {
			switch d := signed(s); {
			case d < -scoreEpsilon:
				return Regressed, []string{s.Name}
			case d > scoreEpsilon:
				return Improved, []string{s.Name}
			}
			return Unchanged, nil
		}
	}
	var worse, better []string
	for _, s := range scores {
		if s.Delta == nil || efficiency(s.Name) {
			continue
		}
		switch d := signed(s); {
		case d < -scoreEpsilon:
			worse = append(worse, s.Name)
		case d > scoreEpsilon:
			better = append(better, s.Name)
		}
	}
	switch {
	case len(worse) > 0:
		return Regressed, worse
	case len(better) > 0:
		return Improved, better
	}
	return Unchanged, nil
}

// signed is the delta oriented so that positive is better.
func signed(s ScoreDelta) float64 {
	if s.LowerIsBetter {
		return -*s.Delta
	}
	return *s.Delta
}

func deltas(base, head map[string]float64) []ScoreDelta {
	names := map[string]bool{}
	for n := range base {
		names[n] = true
	}
	for n := range head {
		names[n] = true
	}
	out := make([]ScoreDelta, 0, len(names))
	for n := range names {
		d := ScoreDelta{Name: n, LowerIsBetter: lowerIsBetter(n)}
		if v, ok := base[n]; ok {
			d.Base = &v
		}
		if v, ok := head[n]; ok {
			d.Head = &v
		}
		if d.Base != nil && d.Head != nil {
			v := *d.Head - *d.Base
			if math.Abs(v) < scoreEpsilon {
				v = 0
			}
			d.Delta = &v
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// recordScores accumulates one record's scores in one run.
type recordScores struct {
	counts TrialCounts
	sum    map[string]float64
	n      map[string]int
}

func (r *recordScores) add(scores []store.Score) {
	for _, s := range scores {
		r.sum[s.Name] += s.Value
		r.n[s.Name]++
	}
}

func (r *recordScores) means() map[string]float64 {
	m := make(map[string]float64, len(r.sum))
	for n, s := range r.sum {
		m[n] = s / float64(r.n[n])
	}
	return m
}

type runScores struct {
	records map[string]*recordScores
	all     map[string]float64
}

func newRecordScores() *recordScores {
	return &recordScores{sum: map[string]float64{}, n: map[string]int{}}
}

func byRecord(d RunDetail) runScores {
	trials := append([]store.Trial(nil), d.Trials...)
	sort.SliceStable(trials, func(i, j int) bool { return trials[i].Trial < trials[j].Trial })
	rs := runScores{records: map[string]*recordScores{}}
	all := newRecordScores()
	for _, t := range trials {
		r := rs.records[t.RecordID]
		if r == nil {
			r = newRecordScores()
			rs.records[t.RecordID] = r
		}
		r.counts.Trials++
		r.counts.TrialIDs = append(r.counts.TrialIDs, t.ID)
		switch {
		case t.Status == store.TrialErrored:
			r.counts.Errored++
		case t.Status == store.TrialFinished && len(d.Scores[t.ID]) > 0:
			r.counts.Scored++
			r.add(d.Scores[t.ID])
			all.add(d.Scores[t.ID])
		}
	}
	rs.all = all.means()
	return rs
}

// WriteComparison prints a comparison for people: the run-level score
// deltas, then one line per record that is not unchanged (all records when
// verbose), then the counts.
func WriteComparison(w io.Writer, c Comparison, verbose bool) error {
	fmt.Fprintf(w, "base %s  %s  status=%s\n", c.Base.ID, c.Base.Name, c.Base.Status)
	fmt.Fprintf(w, "head %s  %s  status=%s\n", c.Head.ID, c.Head.Name, c.Head.Status)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCORE\tBASE\tHEAD\tDELTA")
	for _, s := range c.Scores {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, num(s.Base), num(s.Head), signedNum(s.Delta))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RECORD\tVERDICT\tBY\tDELTAS")
	shown := 0
	for _, r := range c.Records {
		if r.Verdict == Unchanged && !verbose {
			continue
		}
		shown++
		var parts []string
		for _, s := range r.Scores {
			if s.Delta != nil && *s.Delta != 0 {
				parts = append(parts, fmt.Sprintf("%s %s", s.Name, signedNum(s.Delta)))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.RecordID, r.Verdict, strings.Join(r.DecidedBy, ","), strings.Join(parts, " "))
	}
	if shown == 0 {
		fmt.Fprintln(tw, "(no record changed)\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var counts []string
	for _, v := range []string{Regressed, Improved, Unchanged, Added, Removed, Incomparable} {
		if n := c.Counts[v]; n > 0 {
			counts = append(counts, fmt.Sprintf("%s=%d", v, n))
		}
	}
	_, err := fmt.Fprintf(w, "\nrecords: %s (verdicts by %s where both runs have it)\n", strings.Join(counts, " "), c.PassScore)
	return err
}

func num(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *f)
}

func signedNum(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%+.3f", *f)
}
