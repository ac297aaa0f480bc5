package report

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"evals.si/engine"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// RunDetail is a run with its trials and scores, as `evalsi runs show`
// prints it.
type RunDetail struct {
	Run    store.Run
	Trials []store.Trial
	// Scores maps a trial id to its scores.
	Scores map[string][]store.Score
	// Trajectories maps a trial id to what its trajectory holds, when the
	// events were read (LoadTrajectories); nil otherwise.
	Trajectories map[string]TrajectorySummary
}

// RunRow is a run as `evalsi runs list` shows it: the stored run and its
// trials (current attempts) counted by status.
type RunRow struct {
	Run    store.Run
	Counts map[string]int
}

// JSONRun is a run in the JSON of `evalsi runs list` and `runs show`. It
// carries the keys of `evalsi run --json` (JSONSummary: run_id, status,
// records, trials, errored, scores, cost_usd, ...) with the same meaning,
// plus what a listing needs. Keys are only ever added.
type JSONRun struct {
	JSONSummary
	Name string `json:"name"`
	// StatusLabel is the status a person reads ("completed with errors"
	// for a completed run whose trials errored).
	StatusLabel string `json:"status_label"`
	// Target is the model (connector/model) or the agent kind.
	Target   string `json:"target,omitempty"`
	SpecPath string `json:"spec_path,omitempty"`
	Project  string `json:"project,omitempty"`
	// TrialsTotal is records × trials; TrialsDone those that finished or
	// errored.
	TrialsTotal int `json:"trials_total"`
	TrialsDone  int `json:"trials_done"`
	// not_started and stopped (JSONSummary's) say, for a run its budget
	// stopped and not resumed since, what it left for a resume and why.
	CreatedAt  time.Time `json:"created_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	Error      string    `json:"error,omitempty"`
}

// JSONRunDetail is the JSON of `evalsi runs show`: the run and each trial.
// The trials are under trial_results, since "trials" keeps its meaning of
// run --json (trials per record).
type JSONRunDetail struct {
	JSONRun
	TrialResults []JSONTrial `json:"trial_results"`
}

// JSONTrial is one trial (its current attempt) of `evalsi runs show
// --json`, with the keys of `runs export` for the same fields.
type JSONTrial struct {
	TrialID   string             `json:"trial_id"`
	RecordID  string             `json:"record_id"`
	Trial     int                `json:"trial"`
	Attempt   int                `json:"attempt"`
	Status    string             `json:"status"`
	Passed    *bool              `json:"passed"`
	ErrorKind string             `json:"error_kind,omitempty"`
	Error     string             `json:"error,omitempty"`
	Scores    map[string]float64 `json:"scores"`
	Usage     trajectory.Usage   `json:"usage"`
	Tokens    int                `json:"tokens"`
	CostUSD   float64            `json:"cost_usd"`
	// DurationSeconds is from the trial's start to its end; 0 when either
	// is unknown.
	DurationSeconds float64   `json:"duration_seconds"`
	StartedAt       time.Time `json:"started_at,omitzero"`
	FinishedAt      time.Time `json:"finished_at,omitzero"`
	// Trajectory is absent when the events were not read (a server's API
	// does not list them).
	Trajectory *TrajectorySummary `json:"trajectory,omitempty"`
}

// TrajectorySummary is what a trial's events add up to.
type TrajectorySummary struct {
	Events     int `json:"events"`
	Steps      int `json:"steps"`
	ModelCalls int `json:"model_calls"`
	ToolCalls  int `json:"tool_calls"`
	// PolicyEvents counts what the sandbox refused or stopped.
	PolicyEvents int `json:"policy_events"`
	// Checker is the checker's last run (its output whole), nil when none ran.
	Checker *trajectory.Checker `json:"checker,omitempty"`
	// Errors are the messages of the trial's error events, in order.
	Errors []string `json:"errors,omitempty"`
}

// EventReader pages through a trial's events (the store does).
type EventReader interface {
	Events(ctx context.Context, trialID string, afterSeq, limit int) ([]trajectory.Event, error)
}

// LoadTrajectories reads each trial's events and sums them up into
// d.Trajectories, a page at a time.
func LoadTrajectories(ctx context.Context, er EventReader, d *RunDetail) error {
	d.Trajectories = make(map[string]TrajectorySummary, len(d.Trials))
	for _, t := range d.Trials {
		var ts TrajectorySummary
		steps := map[int]bool{}
		agentCalls := 0
		for after := 0; ; {
			evs, err := er.Events(ctx, t.ID, after, exportPage)
			if err != nil {
				return fmt.Errorf("reading the events of trial %s: %w", t.ID, err)
			}
			for _, ev := range evs {
				ts.Events++
				after = ev.Seq
				if ev.Step > 0 {
					steps[ev.Step] = true
				}
				switch ev.Kind {
				case trajectory.KindModelCall:
					ts.ModelCalls++
					if ev.ModelCall != nil && (ev.ModelCall.Role == "" || ev.ModelCall.Role == "agent") {
						agentCalls++
					}
				case trajectory.KindToolCall:
					ts.ToolCalls++
				case trajectory.KindPolicy:
					ts.PolicyEvents++
				case trajectory.KindChecker:
					ts.Checker = ev.Checker
				case trajectory.KindError:
					if ev.Error != nil {
						ts.Errors = append(ts.Errors, ev.Error.Message)
					}
				}
			}
			if len(evs) < exportPage {
				break
			}
		}
		// A step is a model call of the agent's loop; agents whose events
		// carry no step numbers still count their model calls.
		ts.Steps = len(steps)
		if ts.Steps == 0 {
			ts.Steps = agentCalls
		}
		d.Trajectories[t.ID] = ts
	}
	return nil
}

// TargetLabel names what a spec evaluates: "connector/model" for a model,
// the kind (and command, model or URL) for an agent.
func TargetLabel(s *spec.Spec) string {
	if s == nil {
		return ""
	}
	if a := s.Target.Agent; a != nil {
		switch {
		case a.CLI != nil:
			return strings.TrimSpace("cli agent " + a.CLI.Program())
		case a.A2A != nil:
			return "a2a agent " + a.A2A.URL
		case a.MCP != nil:
			return "mcp agent " + a.MCP.Tool
		case a.Responses != nil:
			return "responses agent " + a.Responses.Model
		case a.HTTP != nil:
			return "http agent " + a.HTTP.URL
		case a.Oracle != nil:
			return "oracle"
		}
		return "agent"
	}
	m := s.Target.ModelRef
	switch {
	case m.Connector != "" && m.Model != "":
		return m.Connector + "/" + m.Model
	case m.Model != "":
		return m.Model
	}
	return m.Connector
}

// runView is what the listing and the detail say about a run, from its
// stored summary when it has one and its trial counts.
type runView struct {
	json    JSONRun
	summary *engine.Summary
}

func viewRun(r store.Run, counts map[string]int) (runView, error) {
	v := runView{json: JSONRun{Name: r.Name, SpecPath: r.SpecPath, Project: r.Project, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt, Error: r.Error}}
	if len(r.Spec) > 0 {
		if s, err := r.DecodeSpec(); err == nil {
			v.json.Target = TargetLabel(s)
		}
	}
	if len(r.Summary) > 0 {
		var s engine.Summary
		if err := json.Unmarshal(r.Summary, &s); err != nil {
			return v, fmt.Errorf("reading the summary of run %s: %w", r.ID, err)
		}
		// The same keys and values as `evalsi run --json`, whatever
		// WriteJSON puts there: encode it as run does and read it back.
		var buf bytes.Buffer
		if err := WriteJSON(&buf, &s); err != nil {
			return v, err
		}
		if err := json.Unmarshal(buf.Bytes(), &v.json.JSONSummary); err != nil {
			return v, fmt.Errorf("reading the summary of run %s: %w", r.ID, err)
		}
		v.summary = &s
	}
	// The stored run is the truth for its id and status (a summary is a
	// snapshot taken when it finished; a resumed run runs again).
	v.json.RunID, v.json.Status = r.ID, r.Status
	if v.json.Scores == nil {
		v.json.Scores = map[string]float64{}
	}
	total, done := 0, 0
	for status, n := range counts {
		total += n
		if status == store.TrialFinished || status == store.TrialErrored {
			done += n
		}
	}
	if counts != nil {
		v.json.Errored = counts[store.TrialErrored]
		v.json.TrialsDone = done
	} else if v.summary != nil {
		v.json.TrialsDone = v.summary.Aggregate.TrialsRun
	}
	v.json.TrialsTotal = total
	if v.summary != nil && v.summary.Records*v.summary.Trials > total {
		v.json.TrialsTotal = v.summary.Records * v.summary.Trials
	}
	if v.summary == nil && len(r.Spec) > 0 {
		// Still running: the spec says how many trials each record has.
		if s, err := r.DecodeSpec(); err == nil {
			v.json.Trials = max(s.Trials, 1)
			v.json.Records = total / v.json.Trials
		}
	}
	v.json.StatusLabel = engine.StatusLabel(r.Status, v.json.TrialsDone, v.json.Errored)
	if s := v.summary; s != nil && s.Stopped != "" && s.Status == r.Status {
		// Stopped by its budget (and not resumed since): say so.
		v.json.NotStarted, v.json.Stopped = s.NotStarted, s.Stopped
		v.json.StatusLabel = s.Label()
	} else {
		// A summary a resume has since superseded.
		v.json.NotStarted, v.json.Stopped = 0, ""
	}
	return v, nil
}

// scoreSummary reads a summary's scores for people, in evaluator order:
// "task-success=0.667 (4/6)" for a pass/fail score (passes of the trials
// it scored), "agent-steps=4" for others; at most three, then how many more.
func scoreSummary(s *engine.Summary) string {
	if s == nil {
		return ""
	}
	pass := map[string]bool{}
	for _, e := range s.Aggregate.Evaluators {
		for _, ps := range s.Aggregate.PassSignal {
			if e.Name == ps {
				for _, sc := range e.Scores {
					pass[sc.Name] = true
				}
			}
		}
	}
	var parts []string
	for _, m := range s.Aggregate.Means {
		part := fmt.Sprintf("%s=%.3g", m.Name, m.Mean)
		if (pass[m.Name] || binaryName(m.Name)) && m.N > 0 {
			part += fmt.Sprintf(" (%d/%d)", int(math.Round(m.Mean*float64(m.N))), m.N)
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		// A summary from before means were kept: its flat scores.
		for k, v := range s.Scores {
			parts = append(parts, fmt.Sprintf("%s=%.3g", k, v))
		}
		sort.Strings(parts)
	}
	const most = 3
	if len(parts) > most {
		parts = append(parts[:most:most], fmt.Sprintf("+%d more", len(parts)-most))
	}
	return strings.Join(parts, "  ")
}

// RunsJSON is the JSON of `evalsi runs list`: an array, [] when empty.
func RunsJSON(rows []RunRow) ([]JSONRun, error) {
	out := make([]JSONRun, 0, len(rows))
	for _, r := range rows {
		v, err := viewRun(r.Run, r.Counts)
		if err != nil {
			return nil, err
		}
		out = append(out, v.json)
	}
	return out, nil
}

// WriteRuns lists runs, newest first: status as a person reads it, the
// target, trials done of records × trials, and a score summary.
func WriteRuns(w io.Writer, rows []RunRow) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no runs yet; start one with `evalsi run -f SPEC`")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tNAME\tTARGET\tSTATUS\tTRIALS\tCREATED\tSCORES")
	for _, r := range rows {
		v, err := viewRun(r.Run, r.Counts)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Run.ID, r.Run.Name, dash(v.json.Target), v.json.StatusLabel,
			trialsDone(v.json), r.Run.CreatedAt.Local().Format("2006-01-02 15:04:05"), dash(scoreSummary(v.summary)))
	}
	return tw.Flush()
}

func trialsDone(j JSONRun) string {
	if j.TrialsTotal == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", j.TrialsDone, j.TrialsTotal)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// counts are the run's trials by status, as RunRow holds them.
func (d RunDetail) counts() map[string]int {
	m := map[string]int{}
	for _, t := range d.Trials {
		m[t.Status]++
	}
	return m
}

// RunDetailJSON is the JSON of `evalsi runs show`.
func RunDetailJSON(d RunDetail) (JSONRunDetail, error) {
	v, err := viewRun(d.Run, d.counts())
	if err != nil {
		return JSONRunDetail{}, err
	}
	out := JSONRunDetail{JSONRun: v.json, TrialResults: make([]JSONTrial, 0, len(d.Trials))}
	for _, t := range d.Trials {
		jt := JSONTrial{TrialID: t.ID, RecordID: t.RecordID, Trial: t.Trial, Attempt: t.Attempt, Status: t.Status, Passed: t.Passed,
			ErrorKind: t.ErrorKind, Error: t.Error, Scores: map[string]float64{}, Usage: t.Usage, Tokens: t.Usage.Total(), CostUSD: t.CostUSD,
			DurationSeconds: trialSeconds(t), StartedAt: t.StartedAt, FinishedAt: t.FinishedAt}
		for _, s := range d.Scores[t.ID] {
			jt.Scores[s.Name] = s.Value
		}
		if ts, ok := d.Trajectories[t.ID]; ok {
			jt.Trajectory = &ts
		}
		out.TrialResults = append(out.TrialResults, jt)
	}
	return out, nil
}

func trialSeconds(t store.Trial) float64 {
	if t.StartedAt.IsZero() || t.FinishedAt.IsZero() || t.FinishedAt.Before(t.StartedAt) {
		return 0
	}
	return t.FinishedAt.Sub(t.StartedAt).Seconds()
}

// checkerTail is how many of the checker output's last lines runs show
// prints for a trial (its summary is at the end); --json has them all.
const checkerTail = 20

// WriteRunDetail prints a run: its status, target and scores; per record
// and trial its status, scores and trajectory summary (steps, tool calls,
// tokens, cost, time); then, for each trial that errored or was checked,
// the error whole and the checker's verdict and output.
func WriteRunDetail(w io.Writer, d RunDetail) error {
	r := d.Run
	v, err := viewRun(r, d.counts())
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "run %s  %s  status=%s  spec=%s\n", r.ID, r.Name, v.json.StatusLabel, dash(r.SpecPath))
	fmt.Fprintf(w, "target: %s  trials: %s done, %d errored", dash(v.json.Target), trialsDone(v.json), v.json.Errored)
	if s := scoreSummary(v.summary); s != "" {
		fmt.Fprintf(w, "  scores: %s", s)
	}
	fmt.Fprintln(w)
	if r.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RECORD\tTRIAL\tATTEMPT\tSTATUS\tSCORES\tSTEPS\tTOOL CALLS\tTOKENS\tCOST\tTIME")
	for _, t := range d.Trials {
		var parts []string
		for _, s := range d.Scores[t.ID] {
			parts = append(parts, fmt.Sprintf("%s=%.3g", s.Name, s.Value))
		}
		sort.Strings(parts)
		steps, tools := "-", "-"
		if ts, ok := d.Trajectories[t.ID]; ok {
			steps, tools = fmt.Sprint(ts.Steps), fmt.Sprint(ts.ToolCalls)
		}
		secs := "-"
		if s := trialSeconds(t); s > 0 {
			secs = fmt.Sprintf("%.1fs", s)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t$%.4f\t%s\n", t.RecordID, t.Trial, t.Attempt, t.Status, dash(strings.Join(parts, " ")),
			steps, tools, t.Usage.Total(), t.CostUSD, secs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, t := range d.Trials {
		ts := d.Trajectories[t.ID]
		if t.Error == "" && ts.Checker == nil && len(ts.Errors) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s trial %d (attempt %d): %s\n", t.RecordID, t.Trial, t.Attempt, t.Status)
		if t.Error != "" {
			fmt.Fprintf(w, "  error (%s):\n", dash(t.ErrorKind))
			writeIndented(w, t.Error, "    ")
		}
		for _, e := range ts.Errors {
			if e != t.Error && !strings.Contains(t.Error, e) {
				fmt.Fprintln(w, "  error event:")
				writeIndented(w, e, "    ")
			}
		}
		if c := ts.Checker; c != nil {
			verdict := "fail"
			if c.Pass {
				verdict = "pass"
			}
			fmt.Fprintf(w, "  checker: %s (exit %d, score %.3g)", verdict, c.ExitCode, c.Score)
			if len(c.Command) > 0 {
				fmt.Fprintf(w, "  %s", strings.Join(c.Command, " "))
			}
			fmt.Fprintln(w)
			if c.Details != "" {
				writeIndented(w, c.Details, "    ")
			}
			out := strings.TrimRight(c.Output, "\n")
			if out != "" {
				lines := strings.Split(out, "\n")
				if n := len(lines) - checkerTail; n > 0 {
					fmt.Fprintf(w, "    … %d earlier line(s) of output (all of it: evalsi runs show %s --json)\n", n, r.ID)
					lines = lines[n:]
				}
				writeIndented(w, strings.Join(lines, "\n"), "    ")
			}
		}
	}
	return nil
}

// writeIndented writes s whole, each line behind prefix.
func writeIndented(w io.Writer, s, prefix string) {
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		fmt.Fprintln(w, prefix+line)
	}
}

// JUnit XML, one testcase per record and trial; a trial fails when any of
// its binary scores (pass signals) is 0, and errors when it errored.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr,omitempty"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes a JUnit report; pass names the score that decides a
// testcase (e.g. task-success); empty means every 0/1 score must be 1.
func WriteJUnit(w io.Writer, d RunDetail, pass string) error {
	suite := junitSuite{Name: d.Run.Name + " (" + d.Run.ID + ")"}
	for _, t := range d.Trials {
		c := junitCase{Name: fmt.Sprintf("%s [trial %d]", t.RecordID, t.Trial), Classname: d.Run.Name}
		if !t.FinishedAt.IsZero() && !t.StartedAt.IsZero() {
			c.Time = t.FinishedAt.Sub(t.StartedAt).Seconds()
		}
		var parts []string
		failed := false
		for _, s := range d.Scores[t.ID] {
			parts = append(parts, fmt.Sprintf("%s=%.3g", s.Name, s.Value))
			if (pass == "" || s.Name == pass) && s.Value == 0 && (pass != "" || binaryName(s.Name)) {
				failed = true
			}
		}
		sort.Strings(parts)
		c.SystemOut = strings.Join(parts, "\n")
		switch {
		case t.Status == store.TrialCancelled:
			// Cancelled with its run: it neither passed, failed nor errored.
			c.Skipped = &junitMessage{Message: "cancelled with its run"}
			suite.Skipped++
		case t.Status == store.TrialErrored:
			c.Error = &junitMessage{Message: t.ErrorKind, Type: "infra", Text: t.Error}
			suite.Errors++
		case t.Unfinished():
			c.Error = &junitMessage{Message: "not finished", Type: t.Status}
			suite.Errors++
		case failed:
			c.Failure = &junitMessage{Message: "scores below passing", Text: c.SystemOut}
			suite.Failures++
		}
		suite.Cases = append(suite.Cases, c)
	}
	suite.Tests = len(suite.Cases)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{suite}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// binaryName reports scores that are pass/fail by nature.
func binaryName(name string) bool {
	switch name {
	case "task-success", "exact-match", "includes", "regex", "json-valid", "mergeable", "policy-clean", "within-budget", "trajectory-match":
		return true
	}
	return false
}
