package swebench

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"evals.si/dockerfile"
)

// This file builds a classic instance's eval script as swebench 4.1.0's
// make_test_spec(instance).eval_script does (test_spec/create_scripts.py
// dispatches on MAP_REPO_TO_EXT: make_eval_script_list_py for Python,
// make_eval_script_list_js for JavaScript, make_eval_script_list_common for
// the rest), from the tables in specs.json. Where that code would raise (an
// unknown repo or version, a spec value of the wrong type, a test patch
// unidiff cannot parse) the instance is refused with the reason.

const (
	envName       = "testbed"
	heredocEOF    = "EOF_114329324912"
	scriptHeader  = "#!/bin/bash\nset -uxo pipefail"
	humanevalRepo = "swe-bench/humaneval"
	djangoRepo    = "django/django"
	calypsoRepo   = "Automattic/wp-calypso"
)

func refuse(format string, a ...any) error {
	return &dockerfile.RefusalError{Reason: fmt.Sprintf(format, a...)}
}

// classicEvalScript is swebench 4.1.0's TestSpec.eval_script for a classic
// instance.
func classicEvalScript(in Instance) (string, error) {
	t, err := tables()
	if err != nil {
		return "", err
	}
	versions, ok := t.Specs[in.Repo]
	if !ok {
		return "", refuse("no harness specs for %s: classic instances (no eval_script) are built from SWE-bench %s's MAP_REPO_VERSION_TO_SPECS, which has no such repo (repo names are case-sensitive there; or use a v5 instance with eval_script)", in.Repo, t.SwebenchVersion)
	}
	s, ok := versions[in.Version]
	if !ok {
		return "", refuse("no harness specs for %s version %q in SWE-bench %s's MAP_REPO_VERSION_TO_SPECS (it has versions %s; or use a v5 instance with eval_script)", in.Repo, in.Version, t.SwebenchVersion, strings.Join(slices.Sorted(maps.Keys(versions)), ", "))
	}
	var lines []string
	switch ext := t.Ext[in.Repo]; ext {
	case "py":
		lines, err = evalScriptPy(t, in, s)
	case "js":
		lines, err = evalScriptJS(in, s)
	case "":
		return "", refuse("SWE-bench %s's MAP_REPO_TO_EXT has no language for %s", t.SwebenchVersion, in.Repo)
	default:
		lines, err = evalScriptCommon(in, s)
	}
	if err != nil {
		return "", err
	}
	return scriptHeader + "\n" + strings.Join(lines, "\n") + "\n", nil
}

// specString is a spec value the Python code joins or appends as a string.
func specString(in Instance, key string, raw []byte) (string, error) {
	v, isList, err := stringOrList(raw)
	if err != nil || isList {
		return "", refuse("the harness specs of %s version %s have a %s that is not a string (the harness's Python builder would fail on it)", in.Repo, in.Version, key)
	}
	return v[0], nil
}

func testPatchModified(in Instance) ([]string, error) {
	files, err := modifiedFiles(in.TestPatch)
	if err != nil {
		return nil, refuse("the test patch of %s does not parse as the harness parses it (unidiff): %v", in.InstanceID, err)
	}
	return files, nil
}

// evalScriptPy is make_eval_script_list_py.
func evalScriptPy(t *harnessTables, in Instance, s repoSpecs) ([]string, error) {
	testFiles, err := testPatchModified(in)
	if err != nil {
		return nil, err
	}
	if s.TestCmd == nil {
		return nil, refuse("the harness specs of %s version %s have no test_cmd", in.Repo, in.Version)
	}
	testCmd, err := specString(in, "test_cmd", s.TestCmd)
	if err != nil {
		return nil, err
	}
	// An empty list still leaves the space: the harness's f-string.
	reset := "git checkout " + in.BaseCommit + " " + strings.Join(testFiles, " ")
	cmds := []string{"source /opt/miniconda3/bin/activate", "conda activate " + envName, "cd " + Workdir}
	cmds = append(cmds, s.EvalCommands...)
	cmds = append(cmds,
		"git config --global --add safe.directory "+Workdir,
		"cd "+Workdir,
		"git status",
		"git show",
		"git -c core.fileMode=false diff "+in.BaseCommit,
		"source /opt/miniconda3/bin/activate",
		"conda activate "+envName,
	)
	if s.Install != nil {
		install, err := specString(in, "install", s.Install)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, install)
	}
	return append(cmds,
		reset,
		"git apply -v - <<'"+heredocEOF+"'\n"+in.TestPatch+"\n"+heredocEOF,
		": '"+StartTestOutput+"'",
		strings.Join(append([]string{testCmd}, testDirectives(t, in)...), " "),
		": '"+EndTestOutput+"'",
		reset,
	), nil
}

// evalScriptCommon is make_eval_script_list_common (Go, Rust, Java, PHP,
// Ruby, C, and the base of JavaScript's).
func evalScriptCommon(in Instance, s repoSpecs) ([]string, error) {
	testFiles, err := testPatchModified(in)
	if err != nil {
		return nil, err
	}
	reset := `echo "No test files to reset"`
	if len(testFiles) > 0 {
		reset = "git checkout " + in.BaseCommit + " " + strings.Join(testFiles, " ")
	}
	if s.TestCmd == nil {
		return nil, refuse("the harness specs of %s version %s have no test_cmd", in.Repo, in.Version)
	}
	testCmds, _, err := stringOrList(s.TestCmd)
	if err != nil {
		return nil, refuse("the harness specs of %s version %s: test_cmd: %v", in.Repo, in.Version, err)
	}
	cmds := []string{
		"cd " + Workdir,
		"git config --global --add safe.directory " + Workdir,
		"cd " + Workdir,
		reset,
		"git apply --verbose --reject - <<'" + heredocEOF + "'\n" + in.TestPatch + "\n" + heredocEOF,
	}
	cmds = append(cmds, s.Build...)
	cmds = append(cmds, ": '"+StartTestOutput+"'")
	cmds = append(cmds, testCmds...)
	return append(cmds, ": '"+EndTestOutput+"'", reset), nil
}

// evalScriptJS is make_eval_script_list_js: the common script with the
// image_assets downloads before the test patch, and the test commands of
// a repo in MAP_REPO_TO_TEST_CMDS built from its test patch.
func evalScriptJS(in Instance, s repoSpecs) ([]string, error) {
	cmds, err := evalScriptCommon(in, s)
	if err != nil {
		return nil, err
	}
	assets, err := parseImageAssets(in.ImageAssets)
	if err != nil {
		return nil, err
	}
	cmds = slices.Insert(cmds, 4, downloadCommands(assets)...)
	if in.Repo != calypsoRepo {
		return cmds, nil
	}
	testCmds, err := calypsoTestCmds(in)
	if err != nil {
		return nil, err
	}
	start := slices.Index(cmds, ": '"+StartTestOutput+"'")
	end := slices.Index(cmds, ": '"+EndTestOutput+"'")
	return slices.Concat(cmds[:start+1], testCmds, cmds[end:]), nil
}

var calypsoSnapshot = regexp.MustCompile(`__snapshots__/(.*).js.snap$`)

// calypsoJestJS and calypsoJestJSON are the versions get_test_cmds_calypso
// runs jest directly for, with a .js and a .json config.
var (
	calypsoJestJS   = []string{"10.10.0", "10.12.0", "10.13.0", "10.14.0", "10.15.2", "10.16.3"}
	calypsoJestJSON = []string{"6.11.5", "8.9.1", "8.9.3", "8.9.4", "8.11.0", "8.11.2", "10.4.1", "10.5.0", "10.6.0", "10.9.0"}
)

// calypsoTestCmds is get_test_cmds_calypso.
func calypsoTestCmds(in Instance) ([]string, error) {
	files, err := parsePatchSet(in.TestPatch)
	if err != nil {
		return nil, refuse("the test patch of %s does not parse as the harness parses it (unidiff): %v", in.InstanceID, err)
	}
	var cmds []string
	for _, f := range files {
		p := f.path()
		if calypsoSnapshot.MatchString(p) {
			// Jest snapshots are not run directly: their test directory is.
			parts := strings.Split(p, "/")
			p = strings.Join(parts[:max(0, len(parts)-2)], "/")
		}
		switch {
		case strings.HasPrefix(p, "client") || strings.HasPrefix(p, "packages"):
			pkg := strings.Split(p, "/")[0]
			switch {
			case slices.Contains(calypsoJestJS, in.Version):
				cmds = append(cmds, "./node_modules/.bin/jest --verbose -c=test/"+pkg+"/jest.config.js '"+p+"'")
			case slices.Contains(calypsoJestJSON, in.Version):
				cmds = append(cmds, "./node_modules/.bin/jest --verbose -c=test/"+pkg+"/jest.config.json '"+p+"'")
			default:
				cmds = append(cmds, "npm run test-"+pkg+" --verbose '"+p+"'")
			}
		case strings.HasPrefix(p, "test/e2e"):
			cmds = append(cmds, "cd test/e2e", "NODE_CONFIG_ENV=test npm run test "+p, "cd ../..")
		}
	}
	return cmds, nil
}

var diffHeader = regexp.MustCompile(`diff --git a/.* b/(.*)`)

// testDirectives is get_test_directives: the test patch's files less
// NON_TEST_EXTS, as Django test modules for Django.
func testDirectives(t *harnessTables, in Instance) []string {
	if in.Repo == humanevalRepo {
		return []string{"test.py"}
	}
	var out []string
	for _, m := range diffHeader.FindAllStringSubmatch(in.TestPatch, -1) {
		d := m[1]
		if slices.ContainsFunc(t.NonTestExts, func(e string) bool { return strings.HasSuffix(d, e) }) {
			continue
		}
		if in.Repo == djangoRepo {
			d = strings.TrimSuffix(d, ".py")
			d = strings.TrimPrefix(d, "tests/")
			d = strings.ReplaceAll(d, "/", ".")
		}
		out = append(out, d)
	}
	return out
}
