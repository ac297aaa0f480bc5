package report

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"evals.si/store"
)

// RunDetail is a run with its trials and scores, as `evalsi runs show`
// prints it.
type RunDetail struct {
	Run    store.Run
	Trials []store.Trial
	// Scores maps a trial id to its scores.
	Scores map[string][]store.Score
}

// WriteRuns lists runs, newest first.
func WriteRuns(w io.Writer, runs []store.Run) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tNAME\tSTATUS\tCREATED\tSCORES")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Name, r.Status, r.CreatedAt.Local().Format("2006-01-02 15:04:05"), summaryScores(r.Summary))
	}
	return tw.Flush()
}

func summaryScores(raw json.RawMessage) string {
	var s struct {
		Scores map[string]float64 `json:"scores"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	var parts []string
	for k, v := range s.Scores {
		parts = append(parts, fmt.Sprintf("%s=%.3g", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// WriteRunDetail prints a run: per record and trial its status, scores and
// error.
func WriteRunDetail(w io.Writer, d RunDetail) error {
	r := d.Run
	fmt.Fprintf(w, "run %s  %s  status=%s  spec=%s\n", r.ID, r.Name, r.Status, r.SpecPath)
	if r.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RECORD\tTRIAL\tATTEMPT\tSTATUS\tSCORES\tERROR")
	for _, t := range d.Trials {
		var parts []string
		for _, s := range d.Scores[t.ID] {
			parts = append(parts, fmt.Sprintf("%s=%.3g", s.Name, s.Value))
		}
		sort.Strings(parts)
		errText := ""
		if t.Error != "" {
			errText = t.ErrorKind + ": " + oneLine(t.Error)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", t.RecordID, t.Trial, t.Attempt, t.Status, strings.Join(parts, " "), errText)
	}
	return tw.Flush()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
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
