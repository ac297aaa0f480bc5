package checker

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"

	"evals.si/sandbox"
	"evals.si/spec"
)

// Built-in parser names. junit takes the report's path after the colon:
// "junit:reports/junit.xml".
const (
	ParserExitCode    = "exit-code"
	ParserJSON        = "json"
	ParserJUnitPrefix = "junit:"
)

// Parser turns the checker command's result into a verdict. It may read
// more from the sandbox (a report file). ExitCode and Output of the returned
// verdict are filled in by Run. An error means no verdict could be read; Run
// reports it as an *InfraError.
type Parser func(ctx context.Context, res sandbox.ExecResult, sb Sandbox, workdir string, args spec.JSON) (Verdict, error)

// Registry resolves checker.parser names: the built-in exit-code, json and
// junit:<path>, plus parsers registered as module:function (benchmark
// graders such as evalsi_swebench:parse). Build it at start-up, then share
// it read-only.
type Registry struct {
	named map[string]Parser
}

// moduleFunction is the shape of a registered parser's name.
var moduleFunction = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$`)

// NewRegistry returns a registry with only the built-in parsers.
func NewRegistry() *Registry { return &Registry{named: map[string]Parser{}} }

// Register adds a module:function parser. It panics on a malformed or
// duplicate name, or one that would shadow junit: these are programming
// errors of the start-up code that registers parsers.
func (r *Registry) Register(name string, p Parser) {
	if !moduleFunction.MatchString(name) {
		panic(fmt.Sprintf("checker: parser name %q is not module:function", name))
	}
	if strings.HasPrefix(name, ParserJUnitPrefix) {
		panic(fmt.Sprintf("checker: parser name %q would shadow junit:<path>", name))
	}
	if p == nil {
		panic(fmt.Sprintf("checker: parser %q is nil", name))
	}
	if _, dup := r.named[name]; dup {
		panic(fmt.Sprintf("checker: parser %q registered twice", name))
	}
	r.named[name] = p
}

// Has reports whether name resolves to a parser, so a spec's parser can be
// validated before any trial runs.
func (r *Registry) Has(name string) bool {
	_, err := r.Lookup(name)
	return err == nil
}

// Names lists the registered module:function parsers, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.named))
	for n := range r.named {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup resolves a parser name.
func (r *Registry) Lookup(name string) (Parser, error) {
	switch {
	case name == ParserExitCode:
		return parseExitCode, nil
	case name == ParserJSON:
		return parseJSON, nil
	case strings.HasPrefix(name, ParserJUnitPrefix):
		p := strings.TrimSpace(strings.TrimPrefix(name, ParserJUnitPrefix))
		if p == "" {
			return nil, fmt.Errorf("checker parser %q names no report: write junit:<path>, e.g. junit:report.xml", name)
		}
		return junitParser(p), nil
	}
	if p, ok := r.named[name]; ok {
		return p, nil
	}
	known := append([]string{ParserExitCode, ParserJSON, "junit:<path>"}, r.Names()...)
	return nil, fmt.Errorf("unknown checker parser %q: use one of %s", name, strings.Join(known, ", "))
}

// parseExitCode passes on exit code 0 (score 1), fails otherwise (score 0).
func parseExitCode(_ context.Context, res sandbox.ExecResult, _ Sandbox, _ string, _ spec.JSON) (Verdict, error) {
	if res.ExitCode == 0 {
		return Verdict{Pass: true, Score: 1, Details: "exit code 0"}, nil
	}
	return Verdict{Pass: false, Score: 0, Details: fmt.Sprintf("exit code %d", res.ExitCode)}, nil
}

// parseJSON reads a verdict the checker prints on stdout as a JSON object:
//
//	{"pass": true, "score": 0.75, "details": "3 of 4 cases"}
//
// The object is the whole of stdout, or else the last line of stdout that
// is a JSON object (so logs may come first). Fields:
//   - pass: a boolean. When absent (or null), pass is score >= 1.
//   - score: a number in [0, 1]. When absent (or null), it is 1 when pass,
//     else 0.
//   - details: optional; a string as it is, any other JSON value as its
//     compact JSON text.
//
// At least one of pass and score must be present. Both may be: pass=false
// with score 0.8 is partial credit that does not pass. The exit code does
// not change the verdict (it is still recorded). No JSON object, a wrongly
// typed field or a score outside [0, 1] is an error: the checker's output
// cannot be read, so the trial errors rather than scoring 0.
func parseJSON(_ context.Context, res sandbox.ExecResult, _ Sandbox, _ string, _ spec.JSON) (Verdict, error) {
	obj := findJSONObject(res.Stdout)
	if obj == nil {
		return Verdict{}, infraf(CauseParser, "json parser: no JSON object on the checker's stdout (print {\"pass\": bool, \"score\": 0..1, \"details\": ...} as the last line); stdout: %s", snippet(string(res.Stdout)))
	}
	var f struct {
		Pass    json.RawMessage `json:"pass"`
		Score   json.RawMessage `json:"score"`
		Details json.RawMessage `json:"details"`
	}
	if err := json.Unmarshal(obj, &f); err != nil {
		return Verdict{}, infraf(CauseParser, "json parser: reading %s: %v", obj, err)
	}
	absent := func(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }
	if absent(f.Pass) && absent(f.Score) {
		return Verdict{}, infraf(CauseParser, "json parser: the object %s has neither \"pass\" nor \"score\"", snippet(string(obj)))
	}
	var v Verdict
	if !absent(f.Score) {
		if err := json.Unmarshal(f.Score, &v.Score); err != nil {
			return Verdict{}, infraf(CauseParser, "json parser: \"score\" must be a number in [0, 1], got %s", f.Score)
		}
		if v.Score < 0 || v.Score > 1 {
			return Verdict{}, infraf(CauseParser, "json parser: \"score\" must be in [0, 1], got %s", f.Score)
		}
	}
	if !absent(f.Pass) {
		if err := json.Unmarshal(f.Pass, &v.Pass); err != nil {
			return Verdict{}, infraf(CauseParser, "json parser: \"pass\" must be true or false, got %s", f.Pass)
		}
		if absent(f.Score) && v.Pass {
			v.Score = 1
		}
	} else {
		v.Pass = v.Score >= 1
	}
	if !absent(f.Details) {
		var s string
		if json.Unmarshal(f.Details, &s) == nil {
			v.Details = s
		} else {
			var buf bytes.Buffer
			if json.Compact(&buf, f.Details) == nil {
				v.Details = buf.String()
			}
		}
	}
	return v, nil
}

// findJSONObject returns stdout when it is one JSON object, else its last
// line that is one, else nil.
func findJSONObject(stdout []byte) []byte {
	t := bytes.TrimSpace(stdout)
	if len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return t
	}
	lines := bytes.Split(t, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := bytes.TrimSpace(lines[i])
		if len(l) > 0 && l[0] == '{' && json.Valid(l) {
			return l
		}
	}
	return nil
}

// junitSuite decodes both <testsuites> and <testsuite> roots, and suites
// nested to any depth.
type junitSuite struct {
	XMLName xml.Name
	Suites  []junitSuite `xml:"testsuite"`
	Cases   []junitCase  `xml:"testcase"`
}

type junitCase struct {
	Name      string      `xml:"name,attr"`
	Classname string      `xml:"classname,attr"`
	Failures  []junitNote `xml:"failure"`
	Errors    []junitNote `xml:"error"`
	Skipped   []junitNote `xml:"skipped"`
}

type junitNote struct {
	Message string `xml:"message,attr"`
}

// junitParser reads a JUnit XML report from the sandbox (relative paths
// under the workdir). A test case fails when it has a <failure> or <error>
// element, is skipped when it has <skipped>, and passes otherwise. Skipped
// cases count for nothing. Pass: at least one case ran and none failed.
// Score: passed / (passed + failed); 0 when no case ran. A missing or
// unreadable report is an error.
func junitParser(reportPath string) Parser {
	return func(ctx context.Context, _ sandbox.ExecResult, sb Sandbox, workdir string, _ spec.JSON) (Verdict, error) {
		p := resolve(workdir, reportPath)
		data, err := sb.ReadFile(ctx, p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return Verdict{}, &InfraError{Reason: "junit parser: the checker wrote no report at " + p + " (does the command write JUnit XML there?)", Err: err}
			}
			return Verdict{}, &InfraError{Reason: "junit parser: reading " + p, Err: err}
		}
		var root junitSuite
		if err := xml.Unmarshal(data, &root); err != nil {
			return Verdict{}, &InfraError{Reason: "junit parser: " + p + " is not JUnit XML", Err: err}
		}
		if n := root.XMLName.Local; n != "testsuites" && n != "testsuite" {
			return Verdict{}, infraf(CauseParser, "junit parser: %s has root element <%s>, not <testsuites> or <testsuite>", p, n)
		}
		var passed, skipped int
		var failed []string
		var walk func(s junitSuite)
		walk = func(s junitSuite) {
			for _, c := range s.Cases {
				switch {
				case len(c.Failures) > 0 || len(c.Errors) > 0:
					name := c.Name
					if c.Classname != "" {
						name = c.Classname + "." + c.Name
					}
					failed = append(failed, name)
				case len(c.Skipped) > 0:
					skipped++
				default:
					passed++
				}
			}
			for _, sub := range s.Suites {
				walk(sub)
			}
		}
		walk(root)
		total := passed + len(failed)
		v := Verdict{Pass: total > 0 && len(failed) == 0}
		if total > 0 {
			v.Score = float64(passed) / float64(total)
		}
		v.Details = fmt.Sprintf("%d passed, %d failed, %d skipped", passed, len(failed), skipped)
		if total == 0 {
			v.Details = fmt.Sprintf("no test ran (%d skipped)", skipped)
		}
		if len(failed) > 0 {
			const show = 20
			names := failed
			more := ""
			if len(names) > show {
				more = fmt.Sprintf(" and %d more", len(names)-show)
				names = names[:show]
			}
			v.Details += "; failed: " + strings.Join(names, ", ") + more
		}
		return v, nil
	}
}
