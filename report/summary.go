// Package report prints run results for people (tables) and for scripts
// (one JSON object), with a stable contract.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"evals.si/engine"
	"evals.si/evaluate"
)

// JSONSummary is the contract of `evalsi run --json`: exactly these keys.
// Keys are only ever added. The spend keys: cost_usd and tokens count each
// trial's final attempt; cost_usd_incl_retries and tokens_incl_retries
// every attempt, errored and retried ones included; attempts counts them.
type JSONSummary struct {
	RunID              string             `json:"run_id"`
	Status             string             `json:"status"`
	Records            int                `json:"records"`
	Trials             int                `json:"trials"`
	Errored            int                `json:"errored"`
	Scores             map[string]float64 `json:"scores"`
	CostUSD            float64            `json:"cost_usd"`
	Tokens             int                `json:"tokens"`
	CostUSDInclRetries float64            `json:"cost_usd_incl_retries"`
	TokensInclRetries  int                `json:"tokens_incl_retries"`
	Attempts           int                `json:"attempts"`
	// Categories holds, per record category (metadata.category, which the
	// benchmark importers set), each score's mean over its trials.
	Categories map[string]map[string]float64 `json:"categories,omitempty"`
	// Stderr holds, keyed as Scores, the standard error of each mean that
	// has one (two or more trials; for pass@k, two or more records).
	Stderr map[string]float64 `json:"stderr,omitempty"`
	// NotStarted and Stopped say, for a run its budget stopped, how many
	// trials it did not start and why ("budget $0.50 reached").
	NotStarted int    `json:"not_started,omitempty"`
	Stopped    string `json:"stopped,omitempty"`
}

// stderrs are the known standard errors of a summary's scores, keyed as
// Summary.Scores: score names, "pass@K" and "pass^K".
func stderrs(a evaluate.Summary) map[string]float64 {
	m := map[string]float64{}
	for _, sm := range a.Means {
		if e := ScoreEstimate(sm); e.Known {
			m[sm.Name] = e.Stderr
		}
	}
	for _, p := range a.PassAtK {
		if e := PassKEstimate(p); e.Known {
			m[fmt.Sprintf("pass@%d", p.K)] = e.Stderr
		}
	}
	for _, p := range a.PassHatK {
		if e := PassKEstimate(p); e.Known {
			m[fmt.Sprintf("pass^%d", p.K)] = e.Stderr
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// WriteJSON writes the one-object JSON summary.
func WriteJSON(w io.Writer, s *engine.Summary) error {
	scores := s.Scores
	if scores == nil {
		scores = map[string]float64{}
	}
	var cats map[string]map[string]float64
	for _, g := range s.Aggregate.Groups {
		if cats == nil {
			cats = map[string]map[string]float64{}
		}
		m := make(map[string]float64, len(g.Means))
		for _, sm := range g.Means {
			m[sm.Name] = sm.Mean
		}
		cats[g.Name] = m
	}
	enc := json.NewEncoder(w)
	return enc.Encode(JSONSummary{RunID: s.RunID, Status: s.Status, Records: s.Records, Trials: s.Trials, Errored: s.Errored, Scores: scores,
		CostUSD: s.CostUSD, Tokens: s.Tokens, CostUSDInclRetries: s.CostUSDInclRetries, TokensInclRetries: s.TokensInclRetries, Attempts: s.Attempts,
		Categories: cats, Stderr: stderrs(s.Aggregate), NotStarted: s.NotStarted, Stopped: s.Stopped})
}

// writeGroups prints the per-category breakdown: per category its trials,
// errored trials and the mean of each score.
func writeGroups(w io.Writer, s *engine.Summary) error {
	if len(s.Aggregate.Groups) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CATEGORY\tTRIALS\tERRORED\tSCORES")
	for _, g := range s.Aggregate.Groups {
		parts := make([]string, 0, len(g.Means))
		for _, sm := range g.Means {
			parts = append(parts, fmt.Sprintf("%s=%.3f", sm.Name, sm.Mean))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", g.Name, g.Trials, g.Errored, strings.Join(parts, " "))
	}
	return tw.Flush()
}

// WriteTable writes the human summary: per score the mean with the
// half-width of its 95% interval (1.96 standard errors) and errored count,
// pass@k/pass^k when trials > 1, and spend.
func WriteTable(w io.Writer, s *engine.Summary) error {
	fmt.Fprintf(w, "run %s  %s  status=%s  records=%d  trials=%d  errored=%d\n", s.RunID, s.Name, s.Status, s.Records, s.Trials, s.Errored)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EVALUATOR\tSCORE\tMEAN\t±95%\tSCORED\tERRORED")
	for _, e := range s.Aggregate.Evaluators {
		if len(e.Scores) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t0\t%d\n", e.Name, e.Errored)
		}
		for i, sc := range e.Scores {
			errored := ""
			if i == 0 {
				errored = fmt.Sprint(e.Errored)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.3f\t%s\t%d\t%s\n", e.Name, sc.Name, sc.Mean, ScoreEstimate(sc).PlusMinus(), sc.N, errored)
		}
	}
	for _, p := range s.Aggregate.PassAtK {
		fmt.Fprintf(tw, "pass@k\tpass@%d\t%.3f\t%s\t%d\t\n", p.K, p.Value, PassKEstimate(p).PlusMinus(), p.Records)
	}
	for _, p := range s.Aggregate.PassHatK {
		fmt.Fprintf(tw, "pass^k\tpass^%d\t%.3f\t%s\t%d\t\n", p.K, p.Value, PassKEstimate(p).PlusMinus(), p.Records)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeGroups(w, s); err != nil {
		return err
	}
	fmt.Fprintf(w, "spend: $%.4f  tokens: %d  elapsed: %.1fs\n", s.CostUSD, s.Tokens, s.Elapsed)
	if s.Attempts > s.Records*s.Trials || s.CostUSDInclRetries != s.CostUSD || s.TokensInclRetries != s.Tokens {
		// Errored and retried attempts spent too; the line above counts
		// each trial's final attempt.
		fmt.Fprintf(w, "spend incl. retries: $%.4f  tokens: %d  attempts: %d\n", s.CostUSDInclRetries, s.TokensInclRetries, s.Attempts)
	}
	if s.Stopped != "" { // the run's budget stopped it (helper G)
		fmt.Fprintf(w, "%s; %s\n", s.Label(), engine.ResumeHint(s.Stopped, s.RunID))
	}
	if len(s.ErrorsByKind) > 0 {
		var kinds []string
		for k, n := range s.ErrorsByKind {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
		}
		sort.Strings(kinds)
		fmt.Fprintf(w, "errors by kind: %s (see `evalsi runs show %s`)\n", strings.Join(kinds, " "), s.RunID)
	}
	return nil
}
