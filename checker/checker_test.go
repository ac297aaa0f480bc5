package checker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"evals.si/sandbox"
	"evals.si/spec"
)

func TestRunParsers(t *testing.T) {
	sb := newSandbox(t)
	reg := NewRegistry()
	junitPass := `<?xml version="1.0"?>
<testsuites><testsuite name="a" tests="3">
  <testcase classname="t" name="one"/>
  <testcase classname="t" name="two"/>
  <testcase classname="t" name="skip"><skipped message="later"/></testcase>
</testsuite></testsuites>`
	junitMixed := `<testsuite name="b">
  <testcase classname="m" name="ok1"/>
  <testcase classname="m" name="ok2"/>
  <testcase classname="m" name="bad"><failure message="boom">trace</failure></testcase>
  <testcase classname="m" name="err"><error message="exc"/></testcase>
  <testsuite name="nested"><testcase classname="n" name="ok3"/></testsuite>
</testsuite>`
	junitNone := `<testsuites><testsuite name="c"><testcase name="s"><skipped/></testcase></testsuite></testsuites>`

	tests := []struct {
		name    string
		cfg     spec.Checker
		want    Verdict // ExitCode checked, Output not
		details string  // substring of Details
	}{
		{"exit-code default pass", spec.Checker{Command: []string{"sh", "-c", "echo ok"}},
			Verdict{Pass: true, Score: 1}, "exit code 0"},
		{"exit-code fail", spec.Checker{Command: []string{"sh", "-c", "exit 3"}, Parser: "exit-code"},
			Verdict{Pass: false, Score: 0, ExitCode: 3}, "exit code 3"},
		{"json whole stdout", spec.Checker{Command: []string{"sh", "-c", `printf '{\n "pass": true,\n "score": 1,\n "details": "all good"\n}\n'`}, Parser: "json"},
			Verdict{Pass: true, Score: 1}, "all good"},
		{"json last line after logs, exit code ignored", spec.Checker{Command: []string{"sh", "-c", `echo '{"log": 1}'; echo running; echo '{"pass": false, "score": 0.25, "details": {"cases": [1, 0, 0, 0]}}'; exit 1`}, Parser: "json"},
			Verdict{Pass: false, Score: 0.25, ExitCode: 1}, `{"cases":[1,0,0,0]}`},
		{"json pass only", spec.Checker{Command: []string{"sh", "-c", `echo '{"pass": true}'`}, Parser: "json"},
			Verdict{Pass: true, Score: 1}, ""},
		{"json partial score does not pass", spec.Checker{Command: []string{"sh", "-c", `echo '{"score": 0.5}'`}, Parser: "json"},
			Verdict{Pass: false, Score: 0.5}, ""},
		{"json full score passes", spec.Checker{Command: []string{"sh", "-c", `echo '{"score": 1, "pass": null}'`}, Parser: "json"},
			Verdict{Pass: true, Score: 1}, ""},
		{"junit all pass, skipped excluded", spec.Checker{Files: map[string]string{"r/pass.xml": junitPass}, Command: []string{"true"}, Parser: "junit:r/pass.xml"},
			Verdict{Pass: true, Score: 1}, "2 passed, 0 failed, 1 skipped"},
		{"junit failures and errors, nested suite, absolute path", spec.Checker{Files: map[string]string{"/tmp/mixed.xml": junitMixed}, Command: []string{"sh", "-c", "exit 1"}, Parser: "junit:/tmp/mixed.xml"},
			Verdict{Pass: false, Score: 0.6, ExitCode: 1}, "failed: m.bad, m.err"},
		{"junit no test ran", spec.Checker{Files: map[string]string{"none.xml": junitNone}, Command: []string{"true"}, Parser: "junit:none.xml"},
			Verdict{Pass: false, Score: 0}, "no test ran (1 skipped)"},
		{"checker files are written before the command", spec.Checker{Files: map[string]string{"test_hidden.sh": "exit 0\n", "/tmp/abs.txt": "x"}, Command: []string{"sh", "-c", "sh test_hidden.sh && test -f /tmp/abs.txt"}},
			Verdict{Pass: true, Score: 1}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Run(t.Context(), sb, tc.cfg, testWorkdir, reg)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if v.Pass != tc.want.Pass || v.Score != tc.want.Score || v.ExitCode != tc.want.ExitCode {
				t.Errorf("verdict = pass %v score %v exit %d, want pass %v score %v exit %d (details %q)",
					v.Pass, v.Score, v.ExitCode, tc.want.Pass, tc.want.Score, tc.want.ExitCode, v.Details)
			}
			if !strings.Contains(v.Details, tc.details) {
				t.Errorf("details = %q, want it to contain %q", v.Details, tc.details)
			}
		})
	}
}

func TestRunOutputRecorded(t *testing.T) {
	sb := newSandbox(t)
	v, err := Run(t.Context(), sb, spec.Checker{Command: []string{"sh", "-c", "echo out; echo err >&2; exit 2"}}, testWorkdir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Output != "out\nerr\n" {
		t.Errorf("Output = %q, want stdout then stderr", v.Output)
	}
}

func TestRunInfraErrors(t *testing.T) {
	sb := newSandbox(t)
	tests := []struct {
		name  string
		cfg   spec.Checker
		want  string // substring of the error
		cause string
	}{
		{"missing interpreter", spec.Checker{Command: []string{"python9.99", "-m", "pytest"}}, "could not be started (exit 127", CauseStart},
		{"missing command inside a script", spec.Checker{Command: []string{"sh", "-c", "no-such-runner --all"}}, "exit 127", CauseStart},
		{"not executable", spec.Checker{Files: map[string]string{"run.sh": "exit 0\n"}, Command: []string{"sh", "-c", "./run.sh"}}, "exit 126", CauseStart},
		{"checker timeout", spec.Checker{Command: []string{"sleep", "60"}, Timeout: spec.Duration(500 * 1e6)}, "timed out", CauseTimeout},
		{"json without an object", spec.Checker{Command: []string{"echo", "5 passed"}, Parser: "json"}, "no JSON object", CauseParser},
		{"json score out of range", spec.Checker{Command: []string{"echo", `{"score": 7}`}, Parser: "json"}, "must be in [0, 1]", CauseParser},
		{"json wrong type", spec.Checker{Command: []string{"echo", `{"pass": "yes"}`}, Parser: "json"}, `"pass" must be true or false`, CauseParser},
		{"json neither field", spec.Checker{Command: []string{"echo", `{"ok": true}`}, Parser: "json"}, `neither "pass" nor "score"`, CauseParser},
		{"junit missing report", spec.Checker{Command: []string{"true"}, Parser: "junit:reports/none.xml"}, "wrote no report at /work/task/reports/none.xml", CauseParser},
		{"junit not xml", spec.Checker{Files: map[string]string{"bad.xml": "PASSED 3"}, Command: []string{"true"}, Parser: "junit:bad.xml"}, "is not JUnit XML", CauseParser},
		{"a file under a regular file", spec.Checker{Files: map[string]string{"plain": "x", "plain/inner": "x"}, Command: []string{"true"}}, "writing checker file", CauseFiles},
		{"junit wrong root", spec.Checker{Files: map[string]string{"html.xml": "<html><body/></html>"}, Command: []string{"true"}, Parser: "junit:html.xml"}, "root element <html>", CauseParser},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Run(t.Context(), sb, tc.cfg, testWorkdir, NewRegistry())
			var ie *InfraError
			if !errors.As(err, &ie) {
				t.Fatalf("Run = %+v, %v; want an *InfraError", v, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q, want it to contain %q", err, tc.want)
			}
			if ie.Cause != tc.cause || !ie.AgentCausable() {
				t.Errorf("cause %q (agent-causable %v), want %q", ie.Cause, ie.AgentCausable(), tc.cause)
			}
		})
	}
}

// The engine owns the checker's file paths: a directory, a symlink loop, a
// symlink elsewhere or a FIFO an agent left at one is removed, the file is
// written and the checker grades as usual.
func TestRunClearsWhatTheAgentLeftAtCheckerPaths(t *testing.T) {
	sb := newSandbox(t)
	cfg := spec.Checker{
		Files:   map[string]string{"test_hidden.py": "ok\n"},
		Command: []string{"sh", "-c", "test -f test_hidden.py && test ! -L test_hidden.py && grep -qx ok test_hidden.py"},
	}
	for _, tc := range []struct{ name, plant string }{
		{"directory", "mkdir -p test_hidden.py/sub && touch test_hidden.py/sub/x"},
		{"symlink loop", "ln -s loop_b test_hidden.py && ln -s test_hidden.py loop_b"},
		{"symlink out of the workdir", "ln -s /etc/passwd test_hidden.py"},
		{"fifo", "mkfifo test_hidden.py"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh(t, sb, "rm -rf test_hidden.py loop_b; "+tc.plant)
			v, err := Run(t.Context(), sb, cfg, testWorkdir, NewRegistry())
			if err != nil || !v.Pass {
				t.Fatalf("Run = %+v, %v; want the checker to pass on the file it wrote", v, err)
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	sb := newSandbox(t)
	reg := NewRegistry()
	var gotStdout string
	reg.Register("evalsi_test:parse", func(ctx context.Context, res sandbox.ExecResult, sb Sandbox, workdir string, _ spec.JSON) (Verdict, error) {
		gotStdout = string(res.Stdout)
		// A registered parser may read more from the sandbox.
		data, err := sb.ReadFile(ctx, workdir+"/report.txt")
		if err != nil {
			return Verdict{}, err
		}
		return Verdict{Pass: string(data) == "FAIL_TO_PASS ok\n", Score: 1, Details: "custom"}, nil
	})
	reg.Register("evalsi_test:broken", func(context.Context, sandbox.ExecResult, Sandbox, string, spec.JSON) (Verdict, error) {
		return Verdict{}, errors.New("log format not recognised")
	})

	for _, name := range []string{"exit-code", "json", "junit:a.xml", "evalsi_test:parse"} {
		if !reg.Has(name) {
			t.Errorf("Has(%q) = false", name)
		}
	}
	for _, name := range []string{"", "junit:", "xml", "evalsi_test:nope", "exitcode"} {
		if reg.Has(name) {
			t.Errorf("Has(%q) = true", name)
		}
	}

	v, err := Run(t.Context(), sb, spec.Checker{Command: []string{"sh", "-c", "echo 'FAIL_TO_PASS ok' > report.txt; echo done"}, Parser: "evalsi_test:parse"}, testWorkdir, reg)
	if err != nil || !v.Pass || v.Details != "custom" || gotStdout != "done\n" {
		t.Errorf("registered parser: verdict %+v, err %v, stdout seen %q", v, err, gotStdout)
	}

	_, err = Run(t.Context(), sb, spec.Checker{Command: []string{"true"}, Parser: "evalsi_test:broken"}, testWorkdir, reg)
	var ie *InfraError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "log format not recognised") {
		t.Errorf("failing registered parser: err = %v, want an *InfraError wrapping its error", err)
	}

	// An unknown parser is a spec error, found before anything runs.
	_, err = Run(t.Context(), sb, spec.Checker{Command: []string{"sh", "-c", "touch ran"}, Parser: "evalsi_other:parse"}, testWorkdir, reg)
	if err == nil || errors.As(err, &ie) || !strings.Contains(err.Error(), `unknown checker parser "evalsi_other:parse"`) {
		t.Errorf("unknown parser: err = %v, want a plain spec error", err)
	}
	if _, rerr := sb.ReadFile(t.Context(), testWorkdir+"/ran"); rerr == nil {
		t.Error("the command ran although the parser is unknown")
	}

	for _, bad := range []string{"evalsi_test:parse", "no-colon", "junit:x", "a:b c"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", bad)
				}
			}()
			reg.Register(bad, func(context.Context, sandbox.ExecResult, Sandbox, string, spec.JSON) (Verdict, error) {
				return Verdict{}, nil
			})
		}()
	}
}
