package swebench

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"
)

// specs.json is the harness's tables for classic instances, exported from
// the official package by python/adapters/swebench/export_specs.py (a test
// checks it is current). They come from swebench 4.1.0: 5.x dropped them,
// its instances carry their own eval_script, and 4.1.0 is the last release
// that builds one from the instance's repo and version.
//
//go:embed specs.json
var specsJSON []byte

// harnessTables is specs.json.
type harnessTables struct {
	SwebenchVersion string `json:"swebench_version"`
	// Specs is MAP_REPO_VERSION_TO_SPECS[repo][version], the keys the
	// eval-script builders read.
	Specs map[string]map[string]repoSpecs `json:"map_repo_version_to_specs"`
	// Ext is MAP_REPO_TO_EXT: the language whose builder a repo gets.
	Ext map[string]string `json:"map_repo_to_ext"`
	// Parsers is MAP_REPO_TO_PARSER, by the parser function's name.
	Parsers map[string]string `json:"map_repo_to_parser"`
	// FailOnlyRepos is FAIL_ONLY_REPOS.
	FailOnlyRepos []string `json:"fail_only_repos"`
	// NonTestExts is NON_TEST_EXTS (get_test_directives drops them).
	NonTestExts []string `json:"non_test_exts"`
	// JSCustomTestCmdRepos are MAP_REPO_TO_TEST_CMDS's keys: repos whose
	// test commands a function builds (jsTestCmds has each).
	JSCustomTestCmdRepos []string `json:"js_custom_test_cmd_repos"`
	StartTestOutput      string   `json:"start_test_output"`
	EndTestOutput        string   `json:"end_test_output"`
}

// repoSpecs is one MAP_REPO_VERSION_TO_SPECS entry as far as the eval
// script goes. Values keep their JSON so a builder can tell a missing key
// from an empty one and a string from a list, as the Python code does.
type repoSpecs struct {
	TestCmd      json.RawMessage `json:"test_cmd"`
	EvalCommands []string        `json:"eval_commands"`
	Install      json.RawMessage `json:"install"`
	Build        []string        `json:"build"`
}

// tables decodes specs.json once: it is constant data, read by every
// classic instance's import.
var tables = sync.OnceValues(func() (*harnessTables, error) {
	var t harnessTables
	if err := json.Unmarshal(specsJSON, &t); err != nil {
		return nil, fmt.Errorf("decoding the embedded SWE-bench specs.json (regenerate it with python/adapters/swebench/export_specs.py): %w", err)
	}
	return &t, nil
})

// stringOrList decodes a spec value that is a string or a list of strings;
// isList tells which.
func stringOrList(raw json.RawMessage) (vals []string, isList bool, err error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []string{s}, false, nil
	}
	if err := json.Unmarshal(raw, &vals); err != nil {
		return nil, false, fmt.Errorf("want a string or a list of strings, got %s", raw)
	}
	return vals, true, nil
}
