package web

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"evals.si/engine"
	"evals.si/model"
	"evals.si/report"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// Paging and size limits of the API.
const (
	// DefaultEventPage is how many events /api/trials/{id}/events returns
	// when no limit is given; MaxEventPage caps the limit.
	DefaultEventPage = 500
	MaxEventPage     = 5000
	// maxInlineDiff is how much of a trial's diff the trial endpoint
	// inlines; the artifact endpoint serves it whole.
	maxInlineDiff = 1 << 20
	// checkerTail is how many of a trial's last events are searched for the
	// checker's verdict (the checker runs at the end of a trial).
	checkerTail = 200
	// maxRuns caps the runs list.
	maxRuns = 1000
)

// runView is a run as the API shows it.
type runView struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
	// Label is the status a person reads ("completed with errors" for a
	// completed run whose trials errored), Health how it reads: ok, errors
	// (some trials errored) or no_scores (every trial errored).
	Label  string `json:"label"`
	Health string `json:"health"`
	// stopped is the summary's label of a run its budget stopped (and
	// not resumed since): it wins over Label.
	stopped    string
	SpecPath   string     `json:"spec_path,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Error      string     `json:"error,omitempty"`
	// Target is what was evaluated: the model, or the agent's kind.
	Target string `json:"target,omitempty"`
	// Trials is how many trials the run has in all (records × trials per
	// record), Done how many of them finished (scored or errored).
	Records         int                `json:"records"`
	TrialsPerRecord int                `json:"trials_per_record"`
	Trials          int                `json:"trials"`
	Done            int                `json:"done"`
	Errored         int                `json:"errored"`
	Scores          map[string]float64 `json:"scores,omitempty"`
	// Estimates are the run's score means (then pass@k) with their
	// uncertainty, for the runs list; from the summary of a finished run.
	Estimates []namedEstimate `json:"estimates,omitempty"`
	CostUSD   float64         `json:"cost_usd"`
	Tokens    int             `json:"tokens"`
}

type namedEstimate struct {
	Name string `json:"name"`
	// Headline marks what the runs list shows first: the score that
	// decides a pass (the pass signal's first score) and pass@k; the
	// first scores when the run has no pass signal.
	Headline bool `json:"headline,omitempty"`
	report.Estimate
}

func newRunView(r store.Run, sum *engine.Summary) runView {
	v := runView{ID: r.ID, Name: r.Name, Status: r.Status, SpecPath: r.SpecPath, CreatedAt: r.CreatedAt, Error: r.Error}
	if !r.FinishedAt.IsZero() {
		t := r.FinishedAt
		v.FinishedAt = &t
	}
	var sp spec.Spec
	if json.Unmarshal(r.Spec, &sp) == nil {
		v.Target = targetOf(&sp)
		v.TrialsPerRecord = engine.LimitsOf(&sp).Trials
	}
	if sum != nil {
		v.Records, v.Errored, v.Scores = sum.Records, sum.Errored, sum.Scores
		v.TrialsPerRecord = max(sum.Trials, 1)
		v.Trials = sum.Records * v.TrialsPerRecord
		v.Done = sum.Aggregate.TrialsRun
		if v.Done == 0 && sum.Attempts == 0 {
			v.Done = v.Trials // a summary written before trials_run was
		}
		v.CostUSD, v.Tokens = sum.CostUSD, sum.Tokens
		if sum.Stopped != "" && sum.Status == r.Status {
			v.stopped = sum.Label()
		}
		headline := map[string]bool{}
		for _, e := range sum.Aggregate.Evaluators {
			if slices.Contains(sum.Aggregate.PassSignal, e.Name) && len(e.Scores) > 0 {
				headline[e.Scores[0].Name] = true
			}
		}
		for i, m := range sum.Aggregate.Means {
			v.Estimates = append(v.Estimates, namedEstimate{Name: m.Name, Headline: headline[m.Name] || len(headline) == 0 && i < 3, Estimate: report.ScoreEstimate(m)})
		}
		for _, p := range sum.Aggregate.PassAtK {
			if p.K == sum.Aggregate.Trials {
				v.Estimates = append(v.Estimates, namedEstimate{Name: fmt.Sprintf("pass@%d", p.K), Headline: true, Estimate: report.PassKEstimate(p)})
			}
		}
	}
	v.setLabel()
	return v
}

func (v *runView) setLabel() {
	v.Label = engine.StatusLabel(v.Status, v.Done, v.Errored)
	if v.stopped != "" {
		v.Label = v.stopped
	}
	v.Health = string(engine.RunHealth(v.Done, v.Errored))
}

// targetOf names what a spec evaluates: the agent's kind (and what it
// runs), else the model.
func targetOf(sp *spec.Spec) string {
	if a := sp.Target.Agent; a != nil {
		switch {
		case a.CLI != nil:
			if p := a.CLI.Program(); p != "" {
				return "cli agent · " + p
			}
			return "cli agent"
		case a.A2A != nil:
			return "a2a agent · " + a.A2A.URL
		case a.MCP != nil:
			return "mcp agent"
		case a.Responses != nil:
			return "responses agent"
		case a.HTTP != nil:
			return "http agent · " + a.HTTP.URL
		case a.Oracle != nil:
			return "oracle"
		}
	}
	m := sp.Target.Model
	if m == "" {
		m = sp.Target.Connector
	} else if sp.Target.Connector != "" {
		m = sp.Target.Connector + " · " + m
	}
	if sp.Harness != nil && sp.Harness.External != nil {
		if m == "" {
			return "external harness"
		}
		return "external harness · " + m
	}
	return m
}

func decodeSummary(r store.Run) *engine.Summary {
	if len(r.Summary) == 0 {
		return nil
	}
	var s engine.Summary
	if json.Unmarshal(r.Summary, &s) != nil {
		return nil
	}
	return &s
}

// liveCounts fills a running run's counts from its trials. Trials the
// store does not hold yet count by the spec's trials per record.
func liveCounts(v *runView, trials []store.Trial) {
	records := map[string]bool{}
	v.Done, v.Errored, v.CostUSD, v.Tokens = 0, 0, 0, 0
	for _, t := range trials {
		records[t.RecordID] = true
		if !t.Unfinished() {
			v.Done++
		}
		if t.Status == store.TrialErrored {
			v.Errored++
		}
		v.CostUSD += t.CostUSD
		v.Tokens += t.Usage.Total()
	}
	v.Records = max(v.Records, len(records))
	v.Trials = max(v.Records*max(v.TrialsPerRecord, 1), len(trials))
	v.setLabel()
}

func (s *Server) apiRuns(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	opt := store.ListRunsOptions{Status: q.Get("status"), Name: q.Get("name"), Limit: maxRuns}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			return httpError{http.StatusBadRequest, fmt.Errorf("limit %q: want a positive integer", l)}
		}
		opt.Limit = min(n, maxRuns)
	}
	runs, err := s.store.ListRuns(r.Context(), opt)
	if err != nil {
		if opt.Status != "" {
			return httpError{http.StatusBadRequest, err}
		}
		return err
	}
	out := make([]runView, 0, len(runs))
	for _, run := range runs {
		sum := decodeSummary(run)
		v := newRunView(run, sum)
		if sum == nil || run.Status == store.RunRunning {
			if trials, err := s.store.ListTrials(r.Context(), run.ID); err == nil {
				liveCounts(&v, trials)
			}
		}
		out = append(out, v)
	}
	s.writeJSON(w, r, map[string]any{"runs": out})
	return nil
}

// trialView is a trial as the API shows it; Record and Output are left to
// the trial endpoint.
type trialView struct {
	ID         string           `json:"id"`
	RunID      string           `json:"run_id"`
	RecordID   string           `json:"record_id"`
	Trial      int              `json:"trial"`
	Attempt    int              `json:"attempt"`
	Status     string           `json:"status"`
	Passed     *bool            `json:"passed"`
	ErrorKind  string           `json:"error_kind,omitempty"`
	Error      string           `json:"error,omitempty"`
	Usage      trajectory.Usage `json:"usage"`
	CostUSD    float64          `json:"cost_usd"`
	StartedAt  *time.Time       `json:"started_at,omitempty"`
	FinishedAt *time.Time       `json:"finished_at,omitempty"`
	DurationMS int64            `json:"duration_ms,omitempty"`
	Scores     []scoreView      `json:"scores"`
}

type scoreView struct {
	Name    string          `json:"name"`
	Value   float64         `json:"value"`
	Details json.RawMessage `json:"details,omitempty"`
}

func newTrialView(t store.Trial, scores []store.Score, details bool) trialView {
	v := trialView{ID: t.ID, RunID: t.RunID, RecordID: t.RecordID, Trial: t.Trial, Attempt: t.Attempt, Status: t.Status,
		Passed: t.Passed, ErrorKind: t.ErrorKind, Error: t.Error, Usage: t.Usage, CostUSD: t.CostUSD, Scores: []scoreView{}}
	if !t.StartedAt.IsZero() {
		st := t.StartedAt
		v.StartedAt = &st
		if !t.FinishedAt.IsZero() {
			ft := t.FinishedAt
			v.FinishedAt = &ft
			v.DurationMS = ft.Sub(st).Milliseconds()
		}
	}
	for _, sc := range scores {
		sv := scoreView{Name: sc.Name, Value: sc.Value}
		if details {
			sv.Details = sc.Details
		}
		v.Scores = append(v.Scores, sv)
	}
	return v
}

// runDetailView is the run page's data.
type runDetailView struct {
	Run  runView         `json:"run"`
	Spec json.RawMessage `json:"spec"`
	// Evaluators is the per-evaluator score table: from the summary of a
	// finished run, computed from the trials so far while it runs.
	Evaluators []evaluatorView `json:"evaluators"`
	PassAtK    []passKView     `json:"pass_at_k,omitempty"`
	Records    []recordView    `json:"records"`
	// Errors groups errored trials by error kind.
	Errors []errorGroup `json:"errors"`
	// Isolation lists the distinct isolation reports of the run's trials.
	Isolation []isolationGroup `json:"isolation"`
	Elapsed   float64          `json:"elapsed_seconds"`
}

type evaluatorView struct {
	Name    string     `json:"name"`
	Errored int        `json:"errored"`
	Scores  []meanView `json:"scores"`
}

// meanView is a score's mean over trials with its standard error and 95%
// interval (report.Estimate: mean, n, known, stderr, lo, hi).
type meanView struct {
	Name string `json:"name"`
	report.Estimate
}

// passKView is pass@k or pass^k with its uncertainty over records
// (Estimate's n counts records).
type passKView struct {
	Kind    string  `json:"kind"` // pass@k or pass^k
	K       int     `json:"k"`
	Value   float64 `json:"value"`
	Records int     `json:"records"`
	report.Estimate
}

type recordView struct {
	RecordID string      `json:"record_id"`
	Trials   []trialView `json:"trials"`
}

type errorGroup struct {
	Kind   string       `json:"kind"`
	Count  int          `json:"count"`
	Trials []errorTrial `json:"trials"`
}

type errorTrial struct {
	TrialID  string `json:"trial_id"`
	RecordID string `json:"record_id"`
	Trial    int    `json:"trial"`
	Error    string `json:"error"`
}

type isolationGroup struct {
	Report json.RawMessage `json:"report"`
	Trials int             `json:"trials"`
}

func (s *Server) apiRun(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	run, err := s.store.GetRun(ctx, r.PathValue("id"))
	if err != nil {
		return err
	}
	trials, err := s.store.ListTrials(ctx, run.ID)
	if err != nil {
		return err
	}
	scores, err := s.store.Scores(ctx, run.ID)
	if err != nil {
		return err
	}
	sum := decodeSummary(run)
	d := runDetailView{Run: newRunView(run, sum), Spec: run.Spec, Records: []recordView{}, Errors: []errorGroup{}, Isolation: []isolationGroup{}}
	if sum == nil || run.Status == store.RunRunning {
		liveCounts(&d.Run, trials)
	}
	if sum != nil && run.Status != store.RunRunning {
		d.Elapsed = sum.Elapsed
		for _, e := range sum.Aggregate.Evaluators {
			ev := evaluatorView{Name: e.Name, Errored: e.Errored, Scores: []meanView{}}
			for _, m := range e.Scores {
				ev.Scores = append(ev.Scores, meanView{Name: m.Name, Estimate: report.ScoreEstimate(m)})
			}
			d.Evaluators = append(d.Evaluators, ev)
		}
		for _, p := range sum.Aggregate.PassAtK {
			d.PassAtK = append(d.PassAtK, passKView{Kind: "pass@k", K: p.K, Value: p.Value, Records: p.Records, Estimate: report.PassKEstimate(p)})
		}
		for _, p := range sum.Aggregate.PassHatK {
			d.PassAtK = append(d.PassAtK, passKView{Kind: "pass^k", K: p.K, Value: p.Value, Records: p.Records, Estimate: report.PassKEstimate(p)})
		}
	} else {
		d.Elapsed = time.Since(run.CreatedAt).Seconds()
		d.Evaluators = liveMeans(trials, scores)
	}
	if d.Evaluators == nil {
		d.Evaluators = []evaluatorView{}
	}

	errs := map[string]*errorGroup{}
	iso := map[string]*isolationGroup{}
	var isoOrder []string
	for _, t := range trials {
		if n := len(d.Records); n == 0 || d.Records[n-1].RecordID != t.RecordID {
			d.Records = append(d.Records, recordView{RecordID: t.RecordID})
		}
		rec := &d.Records[len(d.Records)-1]
		rec.Trials = append(rec.Trials, newTrialView(t, scores[t.ID], false))
		if t.Status == store.TrialErrored {
			kind := t.ErrorKind
			if kind == "" {
				kind = "unknown"
			}
			g := errs[kind]
			if g == nil {
				g = &errorGroup{Kind: kind}
				errs[kind] = g
			}
			g.Count++
			g.Trials = append(g.Trials, errorTrial{TrialID: t.ID, RecordID: t.RecordID, Trial: t.Trial, Error: t.Error})
		}
		if len(t.Isolation) > 0 {
			key := string(t.Isolation)
			if iso[key] == nil {
				iso[key] = &isolationGroup{Report: t.Isolation}
				isoOrder = append(isoOrder, key)
			}
			iso[key].Trials++
		}
	}
	for _, g := range errs {
		d.Errors = append(d.Errors, *g)
	}
	sort.Slice(d.Errors, func(i, j int) bool {
		if d.Errors[i].Count != d.Errors[j].Count {
			return d.Errors[i].Count > d.Errors[j].Count
		}
		return d.Errors[i].Kind < d.Errors[j].Kind
	})
	for _, k := range isoOrder {
		d.Isolation = append(d.Isolation, *iso[k])
	}
	s.writeJSON(w, r, d)
	return nil
}

// liveMeans is the score table of a run in progress: one row per score,
// mean over the trials scored so far with its uncertainty.
func liveMeans(trials []store.Trial, scores map[string][]store.Score) []evaluatorView {
	values := map[string][]float64{}
	for _, t := range trials {
		for _, sc := range scores[t.ID] {
			values[sc.Name] = append(values[sc.Name], sc.Value)
		}
	}
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]evaluatorView, 0, len(names))
	for _, k := range names {
		out = append(out, evaluatorView{Name: k, Scores: []meanView{{Name: k, Estimate: report.EstimateOf(values[k])}}})
	}
	return out
}

// trialDetailView is the trial page's data; the events come separately.
type trialDetailView struct {
	Trial     trialView       `json:"trial"`
	Run       runView         `json:"run"`
	Record    json.RawMessage `json:"record,omitempty"`
	Output    string          `json:"output"`
	Isolation json.RawMessage `json:"isolation,omitempty"`
	Events    int             `json:"events"`
	Artifacts []artifactView  `json:"artifacts"`
	Diff      string          `json:"diff"`
	// DiffTruncated is set when Diff holds only the first maxInlineDiff
	// bytes; the artifact endpoint serves all of it.
	DiffTruncated bool                `json:"diff_truncated,omitempty"`
	Checker       *trajectory.Checker `json:"checker,omitempty"`
	// Siblings are the other trials of the same record in the run, to
	// compare this one with side by side.
	Siblings []siblingView `json:"siblings"`
}

type siblingView struct {
	ID      string `json:"id"`
	Trial   int    `json:"trial"`
	Attempt int    `json:"attempt"`
	Status  string `json:"status"`
	Passed  *bool  `json:"passed"`
}

type artifactView struct {
	Name      string `json:"name"`
	Size      int64  `json:"size"`
	MediaType string `json:"media_type"`
}

func (s *Server) apiTrial(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	t, err := s.store.GetTrial(ctx, r.PathValue("id"))
	if err != nil {
		return err
	}
	run, err := s.store.GetRun(ctx, t.RunID)
	if err != nil {
		return err
	}
	scores, err := s.store.TrialScores(ctx, t.ID)
	if err != nil {
		return err
	}
	n, err := s.store.CountEvents(ctx, t.ID)
	if err != nil {
		return err
	}
	arts, err := s.store.Artifacts(ctx, t.ID)
	if err != nil {
		return err
	}
	d := trialDetailView{Trial: newTrialView(t, scores, true), Run: newRunView(run, nil), Record: t.Record,
		Output: t.Output, Isolation: t.Isolation, Events: n, Artifacts: []artifactView{}, Siblings: []siblingView{}}
	d.Run.setLabel()
	all, err := s.store.ListTrials(ctx, t.RunID)
	if err != nil {
		return err
	}
	for _, o := range all {
		if o.RecordID == t.RecordID && o.ID != t.ID {
			d.Siblings = append(d.Siblings, siblingView{ID: o.ID, Trial: o.Trial, Attempt: o.Attempt, Status: o.Status, Passed: o.Passed})
		}
	}
	for _, a := range arts {
		d.Artifacts = append(d.Artifacts, artifactView{Name: a.Name, Size: a.Size, MediaType: a.MediaType})
		if a.Name == "diff.patch" {
			if d.Diff, d.DiffTruncated, err = s.readArtifact(r, a, maxInlineDiff); err != nil {
				return err
			}
		}
	}
	// Seqs are dense from 1, so the last events are after n-checkerTail.
	tail, err := s.store.Events(ctx, t.ID, max(0, n-checkerTail), 0)
	if err != nil {
		return err
	}
	for i := len(tail) - 1; i >= 0; i-- {
		if tail[i].Kind == trajectory.KindChecker && tail[i].Checker != nil {
			d.Checker = tail[i].Checker
			break
		}
	}
	s.writeJSON(w, r, d)
	return nil
}

// readArtifact reads at most limit bytes of an artifact as text, cut at a
// rune boundary.
func (s *Server) readArtifact(r *http.Request, a store.Artifact, limit int) (string, bool, error) {
	rc, err := s.store.OpenBlob(r.Context(), a.Digest)
	if err != nil {
		return "", false, fmt.Errorf("opening artifact %s of trial %s: %w", a.Name, a.TrialID, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, int64(limit)+1))
	if err != nil {
		return "", false, fmt.Errorf("reading artifact %s of trial %s: %w", a.Name, a.TrialID, err)
	}
	truncated := len(b) > limit
	if truncated {
		b = b[:limit]
		// Drop a multi-byte character the cut split (at most 3 bytes).
		for i := 0; i < 3 && len(b) > 0; i++ {
			if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size > 1 {
				break
			}
			b = b[:len(b)-1]
		}
	}
	return string(b), truncated, nil
}

// eventsPage is one page of a trial's events. Next is the after= of the
// next page; More says whether there may be one (a trial still running may
// grow past it).
type eventsPage struct {
	Events []eventView `json:"events"`
	Next   int         `json:"next"`
	More   bool        `json:"more"`
}

// eventView is an event with, for a model call, where its cost comes from:
// "recorded" (the trajectory has it), "pricing" (usage × the run's pricing,
// filled in here) or absent when it is unknown (an unpriced model).
type eventView struct {
	trajectory.Event
	CostSource string `json:"cost_source,omitempty"`
}

// pricingOf is the pricing a run's spend was computed with: the default
// table under the spec's harness.builtin.pricing.
func pricingOf(raw json.RawMessage) model.Pricing {
	p := model.DefaultPricing()
	var sp spec.Spec
	if json.Unmarshal(raw, &sp) == nil && sp.Harness != nil && sp.Harness.Builtin != nil {
		p = p.Merge(sp.Harness.Builtin.Pricing)
	}
	return p
}

func withCost(evs []trajectory.Event, pricing model.Pricing) []eventView {
	out := make([]eventView, len(evs))
	for i, e := range evs {
		out[i].Event = e
		mc := e.ModelCall
		if mc == nil {
			continue
		}
		switch {
		case mc.CostUSD > 0:
			out[i].CostSource = "recorded"
		case mc.Usage.Total() == 0:
			// No usage: nothing to price, the cost is unknown.
		default:
			if c, ok := pricing.Cost(mc.Model, mc.Usage); ok {
				m := *mc
				m.CostUSD = c
				out[i].ModelCall, out[i].CostSource = &m, "pricing"
			}
		}
	}
	return out
}

func (s *Server) apiEvents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	after, limit := 0, DefaultEventPage
	if v := q.Get("after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return httpError{http.StatusBadRequest, fmt.Errorf("after %q: want a non-negative event seq", v)}
		}
		after = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > MaxEventPage {
			return httpError{http.StatusBadRequest, fmt.Errorf("limit %q: want 1 to %d", v, MaxEventPage)}
		}
		limit = n
	}
	id := r.PathValue("id")
	t, err := s.store.GetTrial(r.Context(), id)
	if err != nil {
		return err
	}
	evs, err := s.store.Events(r.Context(), t.ID, after, limit)
	if err != nil {
		return err
	}
	var pricing model.Pricing
	if run, err := s.store.GetRun(r.Context(), t.RunID); err == nil {
		pricing = pricingOf(run.Spec)
	} else {
		pricing = model.DefaultPricing()
	}
	p := eventsPage{Events: withCost(evs, pricing), Next: after, More: len(evs) == limit}
	if len(evs) > 0 {
		p.Next = evs[len(evs)-1].Seq
	}
	s.writeJSON(w, r, p)
	return nil
}

func (s *Server) apiArtifact(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	t, err := s.store.GetTrial(ctx, r.PathValue("id"))
	if err != nil {
		return err
	}
	arts, err := s.store.Artifacts(ctx, t.ID)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	for _, a := range arts {
		if a.Name != name {
			continue
		}
		rc, err := s.store.OpenBlob(ctx, a.Digest)
		if err != nil {
			return err
		}
		defer rc.Close()
		// Artifacts are agent-made content: serve them as plain text (or
		// JSON), never as something the browser would run.
		ct := "text/plain; charset=utf-8"
		if a.MediaType == "application/json" {
			ct = "application/json"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Length", strconv.FormatInt(a.Size, 10))
		w.Header().Set("Content-Security-Policy", "sandbox")
		if _, err := io.Copy(w, bufio.NewReader(rc)); err != nil {
			s.logger.Debug("serving artifact", "trial", t.ID, "name", name, "err", err)
		}
		return nil
	}
	return httpError{http.StatusNotFound, fmt.Errorf("trial %s has no artifact %q", t.ID, name)}
}

func (s *Server) apiCompare(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	base, head := q.Get("base"), q.Get("head")
	if base == "" || head == "" {
		return httpError{http.StatusBadRequest, errors.New("compare needs ?base=RUN&head=RUN")}
	}
	c, err := report.CompareRuns(r.Context(), s.store, base, head, report.CompareOptions{PassScore: q.Get("by")})
	if err != nil {
		return err
	}
	s.writeJSON(w, r, c)
	return nil
}
