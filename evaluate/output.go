package evaluate

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"evals.si/model"
	"evals.si/spec"
)

// This file holds the evaluators of plain model evals: they compare the
// output with the record's `expected` value.

// expectedText returns the record's expected value as text, or an error
// naming the record when it has none.
func expectedText(evaluator string, r spec.Record) (string, error) {
	if r.Expected.IsZero() {
		return "", fmt.Errorf("record %q has no `expected` value, which %s compares the output with: add `expected` to the record", r.ID, evaluator)
	}
	return r.Expected.String(), nil
}

type exactMatch struct{ ignoreCase bool }

func newExactMatch(cfg spec.Evaluator, _ model.Connector) (Evaluator, error) {
	return exactMatch{ignoreCase: cfg.IgnoreCase}, nil
}

func (exactMatch) Name() string { return ExactMatch }

// Evaluate compares output and expected after trimming surrounding
// whitespace (trailing newlines are the usual difference that is no
// difference).
func (e exactMatch) Evaluate(_ context.Context, t Trial) ([]Score, error) {
	want, err := expectedText(ExactMatch, t.Record)
	if err != nil {
		return nil, err
	}
	got, want := strings.TrimSpace(t.Output), strings.TrimSpace(want)
	ok := got == want
	if e.ignoreCase {
		ok = strings.EqualFold(got, want)
	}
	return []Score{{Name: "exact-match", Value: b2f(ok)}}, nil
}

type includes struct{ ignoreCase bool }

func newIncludes(cfg spec.Evaluator, _ model.Connector) (Evaluator, error) {
	return includes{ignoreCase: cfg.IgnoreCase}, nil
}

func (includes) Name() string { return Includes }

// Evaluate checks that the output contains the expected string, or every
// string of an expected list.
func (e includes) Evaluate(_ context.Context, t Trial) ([]Score, error) {
	if _, err := expectedText(Includes, t.Record); err != nil {
		return nil, err
	}
	var wants []string
	var list []spec.JSON
	if err := json.Unmarshal(t.Record.Expected, &list); err == nil {
		for _, v := range list {
			wants = append(wants, v.String())
		}
		if len(wants) == 0 {
			return nil, fmt.Errorf("record %q: `expected` is an empty list, so includes has nothing to look for: list the strings the output must contain", t.Record.ID)
		}
	} else {
		wants = []string{t.Record.Expected.String()}
	}
	out := t.Output
	if e.ignoreCase {
		out = strings.ToLower(out)
	}
	var missing []string
	for _, w := range wants {
		probe := w
		if e.ignoreCase {
			probe = strings.ToLower(w)
		}
		if !strings.Contains(out, probe) {
			missing = append(missing, w)
		}
	}
	s := Score{Name: "includes", Value: b2f(len(missing) == 0)}
	if len(missing) > 0 {
		s.Details = details(map[string]any{"missing": missing})
	}
	return []Score{s}, nil
}

type regex struct{ re *regexp.Regexp }

func newRegex(cfg spec.Evaluator, _ model.Connector) (Evaluator, error) {
	if cfg.Pattern == "" {
		return regex{}, nil
	}
	re, err := regexp.Compile(cfg.Pattern)
	if err != nil {
		return nil, fmt.Errorf("pattern %q is not a valid Go (RE2) regular expression: %w", cfg.Pattern, err)
	}
	return regex{re: re}, nil
}

func (regex) Name() string { return Regex }

// Evaluate reports whether the pattern (the `pattern` option, else the
// record's expected value) matches anywhere in the output; anchor it with
// ^…$ to match the whole output.
func (e regex) Evaluate(_ context.Context, t Trial) ([]Score, error) {
	re := e.re
	if re == nil {
		p, err := expectedText(Regex, t.Record)
		if err != nil {
			return nil, fmt.Errorf("%w, or set the evaluator's `pattern`", err)
		}
		if re, err = regexp.Compile(p); err != nil {
			return nil, fmt.Errorf("record %q: expected value %q is not a valid Go (RE2) regular expression: %w", t.Record.ID, p, err)
		}
	}
	return []Score{{Name: "regex", Value: b2f(re.MatchString(t.Output))}}, nil
}

type jsonValid struct{}

func newJSONValid(spec.Evaluator, model.Connector) (Evaluator, error) { return jsonValid{}, nil }

func (jsonValid) Name() string { return JSONValid }

// Evaluate reports whether the output is one valid JSON value. Models often
// wrap JSON in a Markdown fence, so an output that is exactly one fenced
// block (```json or ```) counts when the block's content is valid JSON;
// JSON embedded in prose does not.
func (jsonValid) Evaluate(_ context.Context, t Trial) ([]Score, error) {
	out := strings.TrimSpace(t.Output)
	if out != "" && json.Valid([]byte(out)) {
		return []Score{{Name: "json-valid", Value: 1}}, nil
	}
	if body, ok := wholeFence(out); ok && json.Valid([]byte(body)) {
		return []Score{{Name: "json-valid", Value: 1, Details: details(map[string]any{"fenced": true})}}, nil
	}
	return []Score{{Name: "json-valid", Value: 0}}, nil
}

// wholeFence returns the content of s when s is exactly one Markdown code
// fence (``` with an optional language tag).
func wholeFence(s string) (string, bool) {
	if !strings.HasPrefix(s, "```") || !strings.HasSuffix(s, "```") || len(s) < 6 {
		return "", false
	}
	nl := strings.IndexByte(s, '\n')
	if nl < 0 {
		return "", false
	}
	tag := strings.TrimSpace(s[3:nl])
	if tag != "" && !strings.EqualFold(tag, "json") {
		return "", false
	}
	body := s[nl+1 : len(s)-3]
	if strings.Contains(body, "```") {
		return "", false
	}
	return strings.TrimSpace(body), true
}
