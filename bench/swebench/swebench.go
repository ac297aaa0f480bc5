// Package swebench imports SWE-bench instances
// (swebench://FILE.jsonl|FILE.json|DIR?instances=a,b) and grades them as
// SWE-bench's harness does.
//
// Classic instances (repo, base_commit, test_patch, FAIL_TO_PASS, …) get the
// eval script the harness builds from its per-repo specs; v5 instances carry
// their own eval_script, log_parser and eval_type. The agent works in
// /testbed of the instance image. The agent's change (the engine's diff
// capture) is graded in a fresh sandbox of the environment
// (checker.fresh), written to PatchPath and applied there with the
// harness's fallbacks in order (git apply, --3way, --reject,
// patch --fuzz=5, then "already applied"); then the eval script runs
// (test files reset, test patch applied, tests between the output
// markers, the exit code recorded) and the log is graded with the
// instance's log parser and the v5 FAIL_TO_PASS / PASS_TO_PASS rule,
// including its invalidation checks (see grading.go). The test lists
// come from the record (checker.parser_args), never the sandbox.
//
// The eval script's output goes to a file in the sandbox that the grader
// reads back (up to LogCap), so logs longer than a command's 1 MiB output
// limit grade whole. Every log parser of the harness's registry is here
// (parsers*.go, with Python's string and regexp semantics kept, see
// pyre.go); a v5 instance's image_assets are downloaded as the harness's
// JavaScript builder downloads them (assets.go).
//
// Query parameters: instances=a,b; image=REF (for every instance);
// network=deny; oracle=true (the gold patch is also placed at
// /testbed/.evalsi-gold.patch). A directory means DIR/test.parquet.
package swebench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"evals.si/bench/importer"
	"evals.si/dataset"
	"evals.si/dockerfile"
	"evals.si/spec"
)

// Scheme is the dataset URI scheme.
const Scheme = "swebench"

// Workdir is where the repository is, in every SWE-bench image.
const Workdir = "/testbed"

// EvalTimeout is the harness's default per-instance test timeout.
const EvalTimeout = 1800 * time.Second

// Register makes reg serve swebench:// URIs.
func Register(reg *dataset.Registry) {
	reg.Register(Scheme, importer.Source(Importer{}, "instances"))
}

// Importer imports SWE-bench instances.
type Importer struct{}

// Instance is a SWE-bench instance, classic or v5.
type Instance struct {
	Repo                   string    `json:"repo"`
	InstanceID             string    `json:"instance_id"`
	BaseCommit             string    `json:"base_commit"`
	Patch                  string    `json:"patch"`
	TestPatch              string    `json:"test_patch"`
	ProblemStatement       string    `json:"problem_statement"`
	HintsText              string    `json:"hints_text"`
	Version                string    `json:"version"`
	FailToPass             stringSet `json:"FAIL_TO_PASS"`
	PassToPass             stringSet `json:"PASS_TO_PASS"`
	EnvironmentSetupCommit string    `json:"environment_setup_commit"`
	// v5
	Image       string          `json:"image"`
	LogParser   string          `json:"log_parser"`
	EvalType    string          `json:"eval_type"`
	EvalScript  string          `json:"eval_script"`
	ImageAssets json.RawMessage `json:"image_assets"`
}

// stringSet decodes a list of strings or a JSON string holding one.
type stringSet []string

func (s *stringSet) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*s = list
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("want a list of test ids or a JSON string of one: %w", err)
	}
	return json.Unmarshal([]byte(str), (*[]string)(s))
}

// Import imports the instances u names.
func (Importer) Import(ctx context.Context, u *url.URL, baseDir string) (*importer.Result, error) {
	q, err := importer.ParseQuery(u, "instances", "oracle")
	if err != nil {
		return nil, err
	}
	oracle := false
	switch v := q.Values.Get("oracle"); v {
	case "", "false":
	case "true":
		oracle = true
	default:
		return nil, fmt.Errorf("oracle=%s: use oracle=true or leave it out", v)
	}
	p, err := importer.Path(u, baseDir)
	if err != nil {
		return nil, err
	}
	all, err := readInstances(p)
	if err != nil {
		return nil, err
	}
	insts, dups := dedupe(all)
	ids := make([]string, len(insts))
	byID := map[string]Instance{}
	for i, in := range insts {
		ids[i] = in.InstanceID
		byID[in.InstanceID] = in
	}
	names, err := importer.Select(ids, q.Names)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	res := &importer.Result{}
	for _, id := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if d, ok := dups[id]; ok {
			res.Note(id, d)
		}
		rec, err := record(byID[id], q, oracle)
		if err != nil {
			res.Refused = append(res.Refused, importer.Refusal{Task: id, Reason: importer.Reason(err)})
			continue
		}
		res.Records = append(res.Records, rec)
	}
	return res, nil
}

// readInstances reads a JSON array or object, or JSON Lines.
func readInstances(p string) ([]Instance, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("reading SWE-bench instances: %w", err)
	}
	if fi.IsDir() {
		p = filepath.Join(p, "test.parquet")
	}
	var out []Instance
	var t []byte
	if strings.HasSuffix(p, ".parquet") {
		if out, err = readParquet(p); err != nil {
			return nil, err
		}
	} else {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading SWE-bench instances: %w", err)
		}
		t = bytes.TrimSpace(b)
	}
	switch {
	case t == nil:
	case bytes.HasPrefix(t, []byte("[")):
		if err := json.Unmarshal(t, &out); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	default:
		for i, line := range bytes.Split(t, []byte("\n")) {
			if line = bytes.TrimSpace(line); len(line) == 0 {
				continue
			}
			var in Instance
			if err := json.Unmarshal(line, &in); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", p, i+1, err)
			}
			out = append(out, in)
		}
	}
	for i, in := range out {
		if in.InstanceID == "" {
			return nil, fmt.Errorf("%s: instance %d has no instance_id", p, i+1)
		}
	}
	return out, nil
}

// dedupe keeps one instance per instance_id: the last copy, in the first
// one's place, as a dict keyed by instance_id keeps it. That is the copy
// the harness's results show: run_evaluation runs every copy, each writing
// the same logs/run_evaluation/…/<instance_id>/report.json, so the last one
// run is what the report reads (and its image and prediction lookups are
// dicts by instance_id). dups says, for each id that had copies, which
// one was kept.
func dedupe(insts []Instance) (out []Instance, dups map[string]string) {
	at := map[string][]int{} // instance_id → its 1-based places in the file
	kept := map[string]int{} // instance_id → its index in out
	for i, in := range insts {
		if j, ok := kept[in.InstanceID]; ok {
			out[j] = in
		} else {
			kept[in.InstanceID] = len(out)
			out = append(out, in)
		}
		at[in.InstanceID] = append(at[in.InstanceID], i+1)
	}
	for id, places := range at {
		if len(places) < 2 {
			continue
		}
		if dups == nil {
			dups = map[string]string{}
		}
		s := make([]string, len(places))
		for i, n := range places {
			s[i] = fmt.Sprint(n)
		}
		dups[id] = fmt.Sprintf("instance_id %s appears %d times in the file (instances %s): the last copy is kept, as SWE-bench's harness reports it", id, len(places), strings.Join(s, ", "))
	}
	return out, dups
}

// ImageName is the harness's image for an instance
// (swebench/task/checks.py::expected_image).
func ImageName(instanceID string) string {
	return "swebench/sweb.eval.x86_64." + strings.ReplaceAll(strings.ToLower(instanceID), "__", "_1776_") + ":latest"
}

func record(in Instance, q importer.Query, oracle bool) (spec.Record, error) {
	script, err := EvalScript(in)
	if err != nil {
		return spec.Record{}, err
	}
	g := Grade{InstanceID: in.InstanceID, FailToPass: in.FailToPass, PassToPass: in.PassToPass, LogParser: in.LogParser, EvalType: in.EvalType, Version: in.Version}
	if g.LogParser == "" {
		// A classic instance's parser is the one its eval script's tables
		// name (MAP_REPO_TO_PARSER of specs.json); a v5 instance that names
		// none gets current upstream's map.
		t, err := tables()
		if err != nil {
			return spec.Record{}, err
		}
		if g.LogParser = t.Parsers[in.Repo]; g.LogParser == "" && in.EvalScript != "" {
			g.LogParser = repoParsers[in.Repo]
		}
	}
	if g.LogParser == "" {
		return spec.Record{}, &dockerfile.RefusalError{Reason: fmt.Sprintf("repo %s is not in SWE-bench's MAP_REPO_TO_PARSER and the instance names no log_parser", in.Repo)}
	}
	if _, err := ParserForInstance(g.LogParser, in.InstanceID, in.Version); err != nil {
		return spec.Record{}, &dockerfile.RefusalError{Reason: fmt.Sprintf("log parser for repo %s: %v", in.Repo, err)}
	}
	if g.EvalType == "" {
		g.EvalType = EvalPassAndFail
		if failOnlyRepos[in.Repo] {
			g.EvalType = EvalFailOnly
		}
	}
	if g.EvalType != EvalPassAndFail && g.EvalType != EvalFailOnly {
		return spec.Record{}, fmt.Errorf("eval_type %q is neither pass_and_fail nor fail_only", g.EvalType)
	}
	img := in.Image
	if img == "" {
		img = ImageName(in.InstanceID)
	}
	if q.Image != "" {
		img = q.Image
	}
	env := &spec.Environment{Image: img, Sandbox: &spec.SandboxPolicy{Workdir: Workdir}}
	importer.SetNetwork(env, "allow", nil, q)
	env.SetupNetwork = ""
	if oracle && in.Patch != "" {
		env.Files = map[string]string{".evalsi-gold.patch": in.Patch}
	}
	// Graded as run_instance grades: in a fresh sandbox of the instance's
	// environment that gets only the agent's diff, at the harness's
	// patch path; the test lists reach the grader from the record (args),
	// never through the sandbox.
	env.Checker = &spec.Checker{
		Files:      map[string]string{"/eval.sh": script},
		Command:    []string{"/bin/bash", "-c", checkerScript()},
		Parser:     ParserGrade,
		ParserArgs: gradeArgs(g),
		Timeout:    spec.Duration(EvalTimeout + 5*time.Minute),
		Fresh:      true,
		PatchFile:  PatchPath,
	}
	input := in.ProblemStatement
	meta := map[string]spec.JSON{
		"environment":          importer.MustJSON(env),
		importer.MetaBenchmark: importer.MustJSON("swebench"),
		"repo":                 importer.MustJSON(in.Repo),
		"base_commit":          importer.MustJSON(in.BaseCommit),
	}
	if in.Patch != "" {
		meta[importer.MetaSolution] = importer.MustJSON(importer.Solution{
			Files:   map[string]string{goldPatchPath: in.Patch},
			Command: "cd " + Workdir + " && " + applyFunc + "\napply_patch " + goldPatchPath,
		})
	}
	return spec.Record{ID: in.InstanceID, Input: spec.Input{Text: input}, Metadata: meta}, nil
}

const goldPatchPath = "/tmp/evalsi-gold.patch"

// PatchPath is where the fresh checker sandbox gets the agent's diff:
// the harness's CONTAINER_PATCH_FILE, outside the repository.
const PatchPath = "/tmp/patch.diff"

// applyFunc applies a patch as run_instance does: each of GIT_APPLY_CMDS
// in order until one succeeds, the tree made pristine before each retry
// (not after the last); then a tree where the patch reverse-applies
// counts as applied (the chain can leave it applied while every command
// exited non-zero); else the Patch Apply Failed marker.
const applyFunc = `apply_patch() {
	first=1
	for cmd in "git apply --verbose" "git apply --verbose --3way" "git apply --verbose --reject" "patch --batch --forward --fuzz=5 -p1 -i"; do
		if [ $first -eq 0 ]; then
			git checkout -- . ; git clean -fd
		fi
		first=0
		if $cmd "$1"; then
			echo "` + applyPatchPass + ` ($cmd)"
			return 0
		fi
		echo "Failed to apply patch to container: $cmd"
	done
	if git apply --check --reverse "$1"; then
		echo "` + applyPatchPass + `: verified already applied"
		return 0
	fi
	echo "` + ApplyPatchFail + `"
	return 1
}`

// applyPatchPass is the harness's APPLY_PATCH_PASS (its logs, not graded).
const applyPatchPass = ">>>>> Applied Patch"

// The checker script's exit codes tell the grader how the run went. They
// are set before any of the agent's code runs (applying a patch runs
// none), so what the agent's tests do later cannot turn an unapplied or
// empty patch into a graded one. Any other code is the script failing.
const (
	exitEvaluated   = 0  // the eval script ran; its output is in TestOutputPath
	exitEmptyPatch  = 10 // the agent changed nothing: the harness does not evaluate it
	exitApplyFailed = 11 // no command of the harness applied the patch
	exitTimedOut    = 12 // the eval script ran past EvalTimeout
	exitNoPatchFile = 13 // the engine wrote no patch file: an infrastructure fault
	exitNoWorkdir   = 14 // the environment has no Workdir: an infrastructure fault
)

// checkerScript runs in the fresh sandbox: the image as set up, nothing
// of the agent's but the patch at PatchPath. It applies the patch with
// the harness's fallbacks, then runs the eval script with the harness's
// timeout, its output to TestOutputPath. It prints no grade: the grader
// takes the test lists from the record and the log from TestOutputPath.
// An empty patch is not evaluated, as run_instances drops empty
// predictions (they count as unresolved).
func checkerScript() string {
	return fmt.Sprintf(`cd %[1]s || exit %[6]d
# oracle=true's copy of the gold patch: the harness's container has none.
rm -f -- .evalsi-gold.patch
[ -f %[2]s ] || { echo "no patch file %[2]s"; exit %[7]d; }
[ -s %[2]s ] || { echo "the agent's patch is empty: not evaluated, as the harness does"; exit %[8]d; }
%[3]s
apply_patch %[2]s 2>&1 || exit %[9]d
rm -f %[5]s
start=$SECONDS
timeout -k 30 %[4]d /bin/bash /eval.sh > %[5]s 2>&1
code=$?
# 124: timed out; 137: killed 30s after ignoring the timeout's TERM.
if [ $code -eq 124 ] || { [ $code -eq 137 ] && [ $((SECONDS - start)) -ge %[4]d ]; }; then
	echo "%[10]s"
	exit %[11]d
fi
exit %[12]d
`, Workdir, PatchPath, applyFunc, int(EvalTimeout.Seconds()), TestOutputPath,
		exitNoWorkdir, exitNoPatchFile, exitEmptyPatch, exitApplyFailed, TestsTimeout, exitTimedOut, exitEvaluated)
}

// TestOutputPath is where the checker writes the eval script's output
// (the harness's test_output.txt). The grader reads it back whole, up to
// LogCap, rather than through the command's stdout, which the sandbox cuts
// at the run's caps.command_output_kb (1 MiB by default): long test logs
// grade on their end marker and results as the harness grades them.
const TestOutputPath = "/tmp/evalsi-test-output.txt"

// LogCap bounds the test output the grader reads (the harness has no
// bound). A longer log is graded on its first LogCap bytes with a note
// that it was cut, which, with the end marker past the cut, makes the log
// invalid: not resolved.
const LogCap = 64 << 20

// EvalScript is the instance's eval script as swebench 5.0.2's
// make_test_spec(instance).eval_script writes it: a v5 instance's own
// eval_script, or for a classic instance the one swebench 4.1.0 builds from
// its repo and version (evalscript.go), which is how the v5 datasets got
// theirs; either way through parse_eval_script and record_test_exit_code.
// A v5 instance's image_assets are also downloaded before its test patch
// (see assets.go); a classic instance's are in the script already where
// the 4.1.0 builder puts them (JavaScript only).
func EvalScript(in Instance) (string, error) {
	src, classic := in.EvalScript, in.EvalScript == ""
	if classic {
		var err error
		if src, err = classicEvalScript(in); err != nil {
			return "", err
		}
	}
	lines := parseEvalScript(src)
	if !classic {
		assets, err := parseImageAssets(in.ImageAssets)
		if err != nil {
			return "", err
		}
		if lines, err = insertDownloads(lines, assets); err != nil {
			return "", &dockerfile.RefusalError{Reason: err.Error()}
		}
	}
	lines = append([]string{"#!/bin/bash", "set -uxo pipefail"}, lines...)
	return recordTestExitCode(strings.Join(lines, "\n")) + "\n", nil
}

// parseEvalScript is parse_eval_script: the script stripped, split into
// lines, and the header lines dropped wherever they are.
func parseEvalScript(script string) []string {
	var lines []string
	for _, l := range strings.Split(pyStrip(script), "\n") {
		if l != "#!/bin/bash" && l != "set -uxo pipefail" {
			lines = append(lines, l)
		}
	}
	return lines
}

// recordTestExitCode inserts the exit-code lines around the end marker's
// line; a script without the marker is left as it is.
func recordTestExitCode(script string) string {
	lines := strings.Split(script, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, EndTestOutput) })
	if i < 0 {
		return script
	}
	out := slices.Clone(lines[:i])
	out = append(out, "SWEBENCH_TEST_EXIT_CODE=$?", lines[i], `echo ">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE"`)
	out = append(out, lines[i+1:]...)
	return strings.Join(out, "\n")
}
