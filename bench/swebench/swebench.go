// Package swebench imports SWE-bench instances
// (swebench://FILE.jsonl|FILE.json|DIR?instances=a,b) and grades them as
// SWE-bench's harness does.
//
// Classic instances (repo, base_commit, test_patch, FAIL_TO_PASS, …) get the
// eval script the harness builds from its per-repo specs; v5 instances carry
// their own eval_script, log_parser and eval_type. The agent works in
// /testbed of the instance image. After the agent, the checker takes the
// agent's change as a patch (git diff against HEAD, new files included),
// resets the repository and applies the patch with the harness's fallbacks
// in order (git apply, --3way, --reject, patch --fuzz=5), then runs the
// eval script (test files reset, test patch applied, tests between the
// output markers, the exit code recorded) and grades the log with the
// instance's log parser and the v5 FAIL_TO_PASS / PASS_TO_PASS rule,
// including its invalidation checks (see grading.go).
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
	"regexp"
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
	insts, err := readInstances(p)
	if err != nil {
		return nil, err
	}
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
	seen := map[string]bool{}
	for i, in := range out {
		if in.InstanceID == "" {
			return nil, fmt.Errorf("%s: instance %d has no instance_id", p, i+1)
		}
		if seen[in.InstanceID] {
			return nil, fmt.Errorf("%s: instance_id %s appears twice", p, in.InstanceID)
		}
		seen[in.InstanceID] = true
	}
	return out, nil
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
	g := Grade{InstanceID: in.InstanceID, FailToPass: in.FailToPass, PassToPass: in.PassToPass, LogParser: in.LogParser, EvalType: in.EvalType}
	if g.LogParser == "" {
		g.LogParser = repoParsers[in.Repo]
	}
	if g.LogParser == "" {
		return spec.Record{}, &dockerfile.RefusalError{Reason: fmt.Sprintf("repo %s is not in SWE-bench's MAP_REPO_TO_PARSER and the instance names no log_parser", in.Repo)}
	}
	if _, err := ParserFor(g.LogParser, in.InstanceID); err != nil {
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
	gradeJSON, _ := json.Marshal(g)
	env.Checker = &spec.Checker{
		Files:   map[string]string{"/eval.sh": script},
		Command: []string{"/bin/bash", "-c", checkerScript(gradeJSON)},
		Parser:  ParserGrade,
		Timeout: spec.Duration(EvalTimeout + 5*time.Minute),
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

// applyFunc applies a patch as run_instance does: each command in order
// until one succeeds, the tree cleaned before each retry; then a patch
// already applied counts; else the Patch Apply Failed marker.
const applyFunc = `apply_patch() {
	for cmd in "git apply --verbose" "git apply --verbose --3way" "git apply --verbose --reject" "patch --batch --forward --fuzz=5 -p1 -i"; do
		if $cmd "$1"; then
			echo ">>>>> Applied Patch ($cmd)"
			return 0
		fi
		git checkout -- . ; git clean -fd
	done
	if git apply --check --reverse "$1"; then
		echo ">>>>> Applied Patch (already applied)"
		return 0
	fi
	echo "` + ApplyPatchFail + `"
	return 1
}`

// gradeMarker starts the checker's first output line, which carries the
// instance's grading data before anything the agent changed runs.
const gradeMarker = ">>>>> evalsi swebench grade "

func checkerScript(grade []byte) string {
	return fmt.Sprintf(`printf '%%s\n' %[1]s
cd %[2]s || exit 0
%[3]s
git add -A -- . ':(exclude).evalsi-gold.patch' >/dev/null 2>&1
git -c core.fileMode=false diff --cached --binary HEAD > /tmp/evalsi-model.patch
git reset -q --hard HEAD && git clean -fdq
apply_patch /tmp/evalsi-model.patch 2>&1 || exit 0
rm -f %[5]s
timeout %[4]d /bin/bash /eval.sh > %[5]s 2>&1
code=$?
echo "%[7]s"
if [ $code -eq 124 ]; then echo "%[6]s"; fi
exit 0
`, dockerfile.Quote(gradeMarker+string(grade)), Workdir, applyFunc, int(EvalTimeout.Seconds()), TestOutputPath, TestsTimeout, testOutputMarker)
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

// testOutputMarker tells the grader that the eval script ran and its
// output is in TestOutputPath.
const testOutputMarker = ">>>>> evalsi test output in " + TestOutputPath

// EvalScript is the instance's eval script as the harness runs it: a v5
// instance's own (with its image_assets downloaded before the test patch,
// see assets.go), or the one the harness builds for a classic instance;
// the test exit code recorded around the end marker either way.
func EvalScript(in Instance) (string, error) {
	var lines []string
	if in.EvalScript != "" {
		for _, l := range strings.Split(in.EvalScript, "\n") {
			if l == "#!/bin/bash" || l == "set -uxo pipefail" {
				continue
			}
			lines = append(lines, l)
		}
		assets, err := parseImageAssets(in.ImageAssets)
		if err != nil {
			return "", err
		}
		if lines, err = insertDownloads(lines, assets); err != nil {
			return "", &dockerfile.RefusalError{Reason: err.Error()}
		}
	} else {
		// make_eval_script_list_py does not download image_assets (only
		// the JavaScript builder does), so a classic instance's are unused.
		s, ok := lookupSpecs(in.Repo, in.Version)
		if !ok {
			return "", &dockerfile.RefusalError{Reason: fmt.Sprintf("no harness specs for %s version %s in this build: the test command of classic instances comes from SWE-bench's MAP_REPO_VERSION_TO_SPECS (use a v5 instance with eval_script)", in.Repo, in.Version)}
		}
		lines = classicEvalScript(in, s)
	}
	script := strings.Join(append([]string{"#!/bin/bash", "set -uxo pipefail"}, lines...), "\n") + "\n"
	return recordTestExitCode(script), nil
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

// repoSpecs is the part of MAP_REPO_VERSION_TO_SPECS an eval script uses.
type repoSpecs struct {
	TestCmd      string
	Install      string
	EvalCommands []string
}

// testPytest is TEST_PYTEST as SPECS_SQLFLUFF sees it. constants/python.py
// assigns TEST_PYTEST twice: first "pytest --no-header -rA --tb=no -p
// no:cacheprovider", then, a few lines below, "pytest -rA", and every spec
// defined after that (sqlfluff's included) gets the second.
const testPytest = "pytest -rA"

// lookupSpecs knows the repos whose specs this build carries.
func lookupSpecs(repo, version string) (repoSpecs, bool) {
	switch repo {
	case "sqlfluff/sqlfluff":
		return repoSpecs{TestCmd: testPytest, Install: "python -m pip install -e ."}, true
	}
	return repoSpecs{}, false
}

var diffHeader = regexp.MustCompile(`diff --git a/.* b/(.*)`)

// nonTestExts are NON_TEST_EXTS: files of a test patch that are not tests.
var nonTestExts = []string{".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml"}

// testDirectives is get_test_directives (non-Django repos).
func testDirectives(in Instance) []string {
	var out []string
	for _, m := range diffHeader.FindAllStringSubmatch(in.TestPatch, -1) {
		d := m[1]
		if slices.ContainsFunc(nonTestExts, func(e string) bool { return strings.HasSuffix(d, e) }) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// patchFiles splits a patch's files into modified ones (with a source) and
// new ones (from /dev/null), as get_modified_files and get_new_files do.
// Only the --- / +++ lines of a file's header count, never hunk lines.
func patchFiles(patch string) (modified, added []string) {
	var src string
	header := false
	for _, line := range strings.Split(patch, "\n") {
		switch {
		case strings.HasPrefix(line, "diff --git "):
			header, src = true, ""
		case header && strings.HasPrefix(line, "--- "):
			src = strings.TrimSpace(strings.TrimPrefix(line, "--- "))
		case header && strings.HasPrefix(line, "+++ "):
			dst := strings.TrimSpace(strings.TrimPrefix(line, "+++ "))
			if src == "/dev/null" {
				added = append(added, strings.TrimPrefix(dst, "b/"))
			} else {
				modified = append(modified, strings.TrimPrefix(src, "a/"))
			}
			header = false
		}
	}
	return modified, added
}

// classicEvalScript is make_eval_script_list_py.
func classicEvalScript(in Instance, s repoSpecs) []string {
	const heredoc = "EOF_114329324912"
	modified, added := patchFiles(in.TestPatch)
	var reset []string
	if len(modified) > 0 {
		reset = append(reset, "git checkout "+in.BaseCommit+" "+strings.Join(modified, " "))
	}
	if len(added) > 0 {
		reset = append(reset, "rm -f "+strings.Join(added, " "))
	}
	cmds := []string{"source /opt/miniconda3/bin/activate", "conda activate testbed", "cd " + Workdir}
	cmds = append(cmds, s.EvalCommands...)
	cmds = append(cmds,
		"git config --global --add safe.directory "+Workdir,
		"cd "+Workdir,
		"git status",
		"git show",
		"git -c core.fileMode=false diff "+in.BaseCommit,
		"source /opt/miniconda3/bin/activate",
		"conda activate testbed",
	)
	if s.Install != "" {
		cmds = append(cmds, s.Install)
	}
	cmds = append(cmds, reset...)
	cmds = append(cmds,
		"git apply -v - <<'"+heredoc+"'\n"+in.TestPatch+"\n"+heredoc,
		": '"+StartTestOutput+"'",
		strings.Join(append([]string{s.TestCmd}, testDirectives(in)...), " "),
		": '"+EndTestOutput+"'",
	)
	cmds = append(cmds, reset...)
	return cmds
}
