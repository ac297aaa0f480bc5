package spec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// base is a minimal valid model run; cases append to it.
const base = "dataset:\n  records: [{id: a, input: x}]\ntarget: {connector: openai, model: m}\n"

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"unknown top-level field", "evaluator: [task-success]\n" + base,
			[]string{`t.yaml:1:1: unknown field "evaluator" at the top level; did you mean "evaluators"?`}},
		{"misspelt nested field", base + "environment:\n  setup_netwrk: allow\n",
			[]string{`t.yaml:5:3: unknown field "setup_netwrk" in environment; did you mean "setup_network"?`}},
		{"misspelt embedded field", "dataset:\n  records: [{id: a, input: x}]\ntarget: {connector: openai, modle: m}\n",
			[]string{`t.yaml:3:29: unknown field "modle" in target; did you mean "model"?`}},
		{"unknown field, nothing close", base + "evaluators: [{name: regex, foo: 1}]\n",
			[]string{`t.yaml:4:28: unknown field "foo" in evaluators[0]`}},
		{"list for mapping", base + "environment: [a]\n",
			[]string{`t.yaml:4:14: environment must be a mapping, not a list`}},
		{"string for int", base + "trials: three\n",
			[]string{`t.yaml:4:9: trials must be an integer, not the string "three"`}},
		{"float for int", base + "concurrency: 2.5\n",
			[]string{`t.yaml:4:14: concurrency must be an integer, not the number 2.5`}},
		{"string for bool", base + "environment:\n  sandbox:\n    read_only_root: yes\n",
			[]string{`t.yaml:6:21: environment.sandbox.read_only_root must be a boolean, not the string "yes"; write true or false`}},
		{"infinite float", base + "harness: {builtin: {tools: {faults: [{tool: bash, kind: error, rate: .inf}]}}}\n",
			[]string{`t.yaml:4:70: harness.builtin.tools.faults[0].rate must be a finite number, not .inf`}},
		{"scalar for mapping", "dataset: x\ntarget: 3\n",
			[]string{`t.yaml:1:10: dataset must be a mapping, not the string "x"`, `t.yaml:2:9: target must be a mapping, not the integer 3`}},
		{"list at the top", "- a\n- b\n",
			[]string{`t.yaml:1:1: the spec must be a mapping, not a list`}},
		{"bad duration", base + "trial_timeout: 10 minutes\n",
			[]string{`t.yaml:4:16: bad duration "10 minutes" for trial_timeout; use a number with a unit: "90s", "10m", "1h30m"`}},
		{"negative duration", base + "environment: {checker: {timeout: -1s}}\n",
			[]string{`t.yaml:4:34: bad duration "-1s" for environment.checker.timeout; durations must not be negative`}},
		{"number for duration", base + "trial_timeout: 10\n",
			[]string{`t.yaml:4:16: trial_timeout must be a duration, not the integer 10; write it as a string such as "90s", "10m" or "1h30m"`}},
		{"mapping for input", "dataset:\n  records:\n    - id: a\n      input: {role: user}\ntarget: {connector: openai, model: m}\n",
			[]string{`t.yaml:4:15: dataset.records[0].input must be a string or a list of {role, content} messages, not a mapping`}},
		{"bad input message", "dataset:\n  records:\n    - id: a\n      input: [{role: user, contnt: hi}]\ntarget: {connector: openai, model: m}\n",
			[]string{`t.yaml:4:28: unknown field "contnt" in dataset.records[0].input[0]; did you mean "content"?`}},
		{"all problems at once", base + "concurrency: 2.5\nenvironment:\n  setup_netwrk: allow\n  sandbox: {memroy_mb: 3}\n",
			[]string{
				`t.yaml:4:14: concurrency must be an integer, not the number 2.5`,
				`t.yaml:6:3: unknown field "setup_netwrk" in environment; did you mean "setup_network"?`,
				`t.yaml:7:13: unknown field "memroy_mb" in environment.sandbox; did you mean "memory_mb"?`,
			}},
		{"unknown alias", base + "judge: *nope\n",
			[]string{`t.yaml:4:8: unknown alias *nope`}},
		{"syntax error", base + "environment: {sandbox: {network: [deny\n",
			[]string{`t.yaml:4:34: YAML: sequence end token ']' not found`}},
		{"duplicate key", base + "trials: 1\ntrials: 2\n",
			[]string{`t.yaml:5:1: YAML: mapping key "trials" already defined at [4:1]`}},
		{"empty", "", []string{`t.yaml: empty spec; a run spec needs at least dataset and target`}},
		{"only a comment", "# nothing\n", []string{`t.yaml: empty spec; a run spec needs at least dataset and target`}},
		{"two documents", base + "---\n" + base,
			[]string{`t.yaml:5:1: more than one YAML document; a spec file holds one run; put each run in its own file`}},
		{"non-string key", base + "environment: {files: {[a]: b}}\n",
			[]string{`t.yaml:4:26: YAML: found an invalid key for this map`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.src))
			checkErrors(t, err, tc.want)
		})
	}
}

func TestValidateErrors(t *testing.T) {
	const tgt = "target: {connector: openai, model: m}\n"
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"no dataset source", "dataset: {}\n" + tgt,
			[]string{`t.yaml:1:1: dataset needs records, path, uri, run or traces; give inline records, a JSONL path, a uri, a run or traces`}},
		{"two dataset sources", "dataset: {path: a.jsonl, uri: 'x://y'}\n" + tgt,
			[]string{`t.yaml:1:31: dataset has both path and uri; use exactly one of records, path, uri, run or traces`}},
		{"empty records", "dataset: {records: []}\n" + tgt,
			[]string{`t.yaml:1:11: dataset.records is empty; add records, or use path or uri`}},
		{"uri without scheme", "dataset: {uri: nothing}\n" + tgt,
			[]string{`t.yaml:1:16: dataset.uri "nothing" has no scheme; write it as scheme://..., e.g. swebench://data/test.jsonl`}},
		{"record ids", "dataset:\n  records:\n    - id: a\n      input: x\n    - input: y\n    - id: a\n      input: z\n" + tgt,
			[]string{
				`t.yaml:5:7: record has no id; give every record a unique id`,
				`t.yaml:6:11: duplicate record id "a" (first at line 3); give every record a unique id`,
			}},
		{"record without input", "dataset:\n  records:\n    - id: a\n" + tgt,
			[]string{`t.yaml:3:7: record "a" has no input; give the task or prompt as input`}},
		{"target empty", "dataset: {path: a}\ntarget: {}\n",
			[]string{`t.yaml:2:1: target names no model and no agent; set connector and model (e.g. connector: openai, model: gpt-5), or agent`}},
		{"target both", "dataset: {path: a}\ntarget: {connector: openai, model: m, agent: {cli: {command: x}}}\n",
			[]string{`t.yaml:2:39: target names both a model and an agent; use either connector and model, or agent`}},
		{"bad connector, no model", "dataset: {path: a}\ntarget: {connector: opnai}\n",
			[]string{
				`t.yaml:2:1: target needs a model; set model to the provider's model name, e.g. model: gpt-5`,
				`t.yaml:2:21: bad connector "opnai"; did you mean "openai"? use one of openai, anthropic, scripted`,
			}},
		{"scripted without script", "dataset: {path: a}\ntarget: {connector: scripted, model: s}\n",
			[]string{`t.yaml:2:1: the scripted connector needs a script; give script (inline) or script_file`}},
		{"script on another connector", "dataset: {path: a}\ntarget: {connector: openai, model: m, script_file: s.yaml}\n",
			[]string{`t.yaml:2:52: script_file is only used by the scripted connector; set connector: scripted, or remove it`}},
		{"agent of no kind", "dataset: {path: a}\ntarget: {agent: {}}\n",
			[]string{`t.yaml:2:10: agent names no kind; set one of a2a, mcp, responses, http, cli or oracle`}},
		{"agent of two kinds", "dataset: {path: a}\ntarget: {agent: {cli: {command: x}, oracle: }}\n",
			[]string{`t.yaml:2:37: agent has both cli and oracle; an agent has exactly one kind`}},
		{"sandbox enums", base + "environment:\n  setup_network: maybe\n  sandbox:\n    network: maybe\n    min_isolation: kvm\n    ladder: [bwrap, bwarp, host, bwrap]\n",
			[]string{
				`t.yaml:5:18: bad setup_network "maybe"; use one of deny, allow`,
				`t.yaml:7:14: bad network "maybe"; use one of deny, allowlist, allow`,
				`t.yaml:8:20: bad min_isolation "kvm"; did you mean "vm"? use one of process, namespaced, container, vm`,
				`t.yaml:9:21: bad rung "bwarp"; did you mean "bwrap"? use one of firecracker, qemu, smolvm, bwrap, landlock, docker, pod, host`,
				`t.yaml:9:28: the host rung has no isolation; set allow_unsafe_host: true if you accept running agents with no isolation`,
				`t.yaml:9:34: rung "bwrap" is listed twice (first at column 14); list each rung once`,
			}},
		{"allowlist without hosts", base + "environment:\n  sandbox:\n    network: allowlist\n",
			[]string{`t.yaml:6:14: network allowlist needs allow_hosts; list the hosts in allow_hosts as host:port`}},
		{"bad allow_hosts", base + "environment:\n  sandbox:\n    network: allowlist\n    allow_hosts: [pypi.org, 'a:99999', 'b:443']\n",
			[]string{
				`t.yaml:7:19: bad host "pypi.org"; write host:port, e.g. pypi.org:443`,
				`t.yaml:7:29: bad port in "a:99999"; the port is a number from 1 to 65535`,
			}},
		{"allow_hosts without allowlist, bad cgroup", base + "environment:\n  sandbox:\n    allow_hosts: ['b:443']\n    cgroup: sys/fs\n",
			[]string{
				`t.yaml:6:5: allow_hosts is only used with network: allowlist; set network: allowlist`,
				`t.yaml:7:13: bad cgroup "sys/fs"; use auto, off, or the absolute path of a delegated cgroup v2 directory`,
			}},
		{"bad parser", base + "environment:\n  checker:\n    parser: 'junit:'\n",
			[]string{`t.yaml:6:13: bad parser "junit:"; use exit-code, json, junit:<path> or module:function`}},
		{"bad parser function", base + "environment:\n  checker:\n    parser: 'my module:fn'\n",
			[]string{`t.yaml:6:13: bad parser "my module:fn"; use exit-code, json, junit:<path> or module:function`}},
		{"recording and faults", base + "harness:\n  builtin:\n    recording: {mode: rec, dir: d}\n    tools:\n      faults:\n        - {tool: bash, kind: crash, rate: 1.5}\n",
			[]string{
				`t.yaml:6:23: bad recording mode "rec"; did you mean "record"? use one of record, replay`,
				`t.yaml:9:30: bad fault kind "crash"; use one of error, timeout, malformed`,
				`t.yaml:9:43: fault rate 1.5 is out of range; a rate is a fraction from 0 to 1`,
			}},
		{"native mode, prompted format", base + "harness:\n  builtin:\n    tool_call_mode: native\n    tool_call_format: fenced_shell\n",
			[]string{`t.yaml:7:23: tool_call_format fenced_shell does not work with tool_call_mode native; native mode takes native_json`}},
		{"prompted mode, native format", base + "harness:\n  builtin:\n    tool_call_mode: prompted\n    tool_call_format: native_json\n",
			[]string{`t.yaml:7:23: tool_call_format native_json does not work with tool_call_mode prompted; prompted mode takes tool_call_tags or fenced_shell`}},
		{"bad tool_call_mode", base + "harness:\n  builtin:\n    tool_call_mode: natve\n",
			[]string{`t.yaml:6:21: bad tool_call_mode "natve"; did you mean "native"? use one of auto, native, prompted`}},
		{"user simulator", base + "harness:\n  builtin:\n    user_simulator: {goal: g}\n",
			[]string{
				`t.yaml:6:5: user_simulator.max_turns must be at least 1; set max_turns to the most user turns a conversation may have`,
				`t.yaml:6:5: the user simulator needs a judge model; set judge (or user_simulator.judge), or pass --judge-provider and --judge-model`,
			}},
		{"empty harness", base + "harness: {}\n",
			[]string{`t.yaml:4:1: harness names neither builtin nor external; set builtin: {} for the built-in agent, or external`}},
		{"evaluators", base + "evaluators:\n  - task-sucess\n  - name: exact-match\n    merge_bar: 4\n  - code-quality\n  - name: llm-judge\n    threshold: 2\n  - name: trajectory-match\n    mode: fuzzy\n  - exact-match\n",
			[]string{
				`t.yaml:5:5: unknown evaluator "task-sucess"; did you mean "task-success"? use one of exact-match, includes, regex, json-valid, llm-judge, task-success, code-quality, policy-violations, agent-efficiency, tool-call-accuracy, trajectory-match, loops, goal-completion`,
				`t.yaml:7:16: evaluator exact-match takes no option merge_bar; merge_bar is an option of code-quality`,
				`t.yaml:8:5: evaluator code-quality needs a judge model; set judge: {connector, model} in the spec, or pass --judge-provider and --judge-model`,
				`t.yaml:9:11: evaluator llm-judge needs a judge model; set judge: {connector, model} in the spec, or pass --judge-provider and --judge-model`,
				`t.yaml:10:16: threshold 2 is out of range; a threshold is from 0 to 1`,
				`t.yaml:12:11: bad trajectory-match mode "fuzzy"; use one of exact, in-order, any-order, subset`,
				`t.yaml:13:5: evaluator "exact-match" is listed twice (first at line 6); list each evaluator once, with all its options in that entry`,
			}},
		{"negative disk_mb", base + "environment: {sandbox: {disk_mb: -1}}\n",
			[]string{`t.yaml:4:34: environment.sandbox.disk_mb is negative (-1); use 0 or a positive number`}},
		{"run counts", base + "concurrency: -1\nretries: -1\n",
			[]string{
				`t.yaml:4:14: concurrency must be at least 1 (it is -1); concurrency bounds the trials in flight: use 1 or more, or leave it out for 2 × CPUs`,
				`t.yaml:5:10: retries is negative (-1); retries is how often a trial that hit an infrastructure error runs again: use 0 for none, or leave it out for 2`,
			}},
		{"negative caps", base + "caps:\n  command_output_kb: -1\n  model_response_mb: -64\n  event_text_kb: -2\n  trial_memory_mb: -16\n",
			[]string{
				`t.yaml:5:22: caps.command_output_kb -1 is out of range; use 1 to 1048576 KiB, or 0 for the default (1024 KiB)`,
				`t.yaml:6:22: caps.model_response_mb -64 is out of range; use 1 to 4096 MiB, or 0 for the default (64 MiB)`,
				`t.yaml:7:18: caps.event_text_kb -2 is out of range; use 1 to 65536 KiB, or 0 for the default (64 KiB)`,
				`t.yaml:8:20: caps.trial_memory_mb -16 is out of range; use 1 to 65536 MiB, or 0 for the default (16 MiB)`,
			}},
		{"caps too large", base + "caps: {command_output_kb: 1048577, model_response_mb: 4097, event_text_kb: 65537, trial_memory_mb: 1048576}\n",
			[]string{
				`t.yaml:4:27: caps.command_output_kb 1048577 is out of range; use 1 to 1048576 KiB, or 0 for the default (1024 KiB)`,
				`t.yaml:4:55: caps.model_response_mb 4097 is out of range; use 1 to 4096 MiB, or 0 for the default (64 MiB)`,
				`t.yaml:4:76: caps.event_text_kb 65537 is out of range; use 1 to 65536 KiB, or 0 for the default (64 KiB)`,
				`t.yaml:4:100: caps.trial_memory_mb 1048576 is out of range; use 1 to 65536 MiB, or 0 for the default (16 MiB)`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("t.yaml", []byte(tc.src))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			checkErrors(t, f.Validate(), tc.want)
		})
	}
}

func checkErrors(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want:\n%s", strings.Join(want, "\n"))
	}
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, not Errors: %v", err, err)
	}
	var e *Error
	if !errors.As(err, &e) || e != es[0] {
		t.Errorf("errors.As(*Error) does not find the first error")
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// A judge given after loading (the CLI's --judge-model) satisfies the
// evaluators that need one: Validate runs after overrides.
func TestValidateAfterOverride(t *testing.T) {
	f, err := Parse("t.yaml", []byte(base+"evaluators: [code-quality]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Validate() == nil {
		t.Fatal("code-quality without a judge validated")
	}
	f.Spec.Judge = &ModelRef{Connector: "anthropic", Model: "claude-opus-5-5"}
	if err := f.Validate(); err != nil {
		t.Fatalf("after override: %v", err)
	}
}

// Spec.Validate, for specs that did not come from a file (an EvalRun),
// names field paths instead of positions.
func TestSpecValidateWithoutFile(t *testing.T) {
	s := &Spec{
		Dataset:     Dataset{Records: []Record{{ID: "a", Input: Input{Text: "x"}}, {ID: "a", Input: Input{Text: "y"}}}},
		Target:      Target{ModelRef: ModelRef{Connector: "openai", Model: "m"}},
		Environment: &Environment{Sandbox: &SandboxPolicy{Network: "maybe"}},
		Trials:      -2,
	}
	s.ApplyDefaults()
	// A message that names its field is not prefixed with it again.
	checkErrors(t, s.Validate(), []string{
		`trials must be at least 1 (it is -2); trials is how many times each record runs: use 1 or more, or leave it out for 1`,
		`dataset.records[1].id: duplicate record id "a" (first at dataset.records[0].id); give every record a unique id`,
		`environment.sandbox.network: bad network "maybe"; use one of deny, allowlist, allow`,
	})
}

func TestToolCallMatrix(t *testing.T) {
	want := map[string]map[string]bool{
		"auto":     {"tool_call_tags": true, "fenced_shell": true, "native_json": true, "": true},
		"native":   {"tool_call_tags": false, "fenced_shell": false, "native_json": true, "": true},
		"prompted": {"tool_call_tags": true, "fenced_shell": true, "native_json": false, "": true},
	}
	for mode, formats := range want {
		for format, ok := range formats {
			if got := ToolCallFormatAllowed(mode, format); got != ok {
				t.Errorf("ToolCallFormatAllowed(%q, %q) = %v, want %v", mode, format, got, ok)
			}
		}
	}
}

func TestParserSyntax(t *testing.T) {
	for p, ok := range map[string]bool{
		"exit-code": true, "json": true, "junit:report.xml": true, "junit:": false,
		"evalsi_swebench.parsers:parse": true, "mod:fn": true, "mod:": false, ":fn": false,
		"a b:c": false, "exitcode": false, "mod:fn:x": false,
	} {
		if got := ParserSyntaxOK(p); got != ok {
			t.Errorf("ParserSyntaxOK(%q) = %v, want %v", p, got, ok)
		}
	}
}

// An alias bomb ("billion laughs") stops with an error instead of
// expanding without bound.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("x: &a0 [l, l, l, l, l, l, l, l, l]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "x%d: &a%d [", i, i)
		for j := range 9 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	b.WriteString("dataset: {records: [{id: x, input: x, expected: *a9}]}\n")
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "expands too far through aliases") {
		t.Fatalf("err = %v", err)
	}
}

// TestSemanticErrors: each problem that only validation finds (a value of
// the right type that is wrong) points at the offending node with
// file:line:column and says what to do, as YAML-level errors do.
func TestSemanticErrors(t *testing.T) {
	const tgt = "target: {connector: openai, model: m}\n"
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"negative trials", base + "trials: -2\n",
			[]string{`t.yaml:4:9: trials must be at least 1 (it is -2); trials is how many times each record runs: use 1 or more, or leave it out for 1`}},
		{"unknown connector", "dataset: {path: a}\ntarget:\n  connector: anthropc\n  model: m\n",
			[]string{`t.yaml:3:14: bad connector "anthropc"; did you mean "anthropic"? use one of openai, anthropic, scripted`}},
		{"unknown judge connector", base + "judge: {connector: gemini, model: j}\n",
			[]string{`t.yaml:4:20: bad connector "gemini"; use one of openai, anthropic, scripted`}},
		{"network denied", base + "environment:\n  sandbox:\n    network: denied\n",
			[]string{`t.yaml:6:14: bad network "denied"; did you mean "deny"? use one of deny, allowlist, allow`}},
		{"checker network", base + "environment:\n  checker:\n    command: [pytest]\n    network: allowed\n",
			[]string{`t.yaml:7:14: bad checker network "allowed"; did you mean "allow"? use one of deny, allowlist, allow`}},
		{"unknown rung", base + "environment:\n  sandbox:\n    ladder:\n      - bwrap\n      - dockr\n",
			[]string{`t.yaml:8:9: bad rung "dockr"; did you mean "docker"? use one of firecracker, qemu, smolvm, bwrap, landlock, docker, pod, host`}},
		{"unknown evaluator", base + "evaluators: [exact_match, includes]\n",
			[]string{`t.yaml:4:14: unknown evaluator "exact_match"; did you mean "exact-match"? use one of exact-match, includes, regex, json-valid, llm-judge, task-success, code-quality, policy-violations, agent-efficiency, tool-call-accuracy, trajectory-match, loops, goal-completion`}},
		{"duplicate evaluator on one line", base + "evaluators: [includes, includes]\n",
			[]string{`t.yaml:4:24: evaluator "includes" is listed twice (first at column 14); list each evaluator once, with all its options in that entry`}},
		{"duplicate mocks and MCP servers", base + "harness:\n  builtin:\n    tools:\n      mcp:\n        - {name: fs, url: 'http://127.0.0.1:1/mcp'}\n        - {name: fs, command: [srv]}\n      mocks:\n        - {name: lookup, response: 1}\n        - {name: lookup, response: 2}\n        - {response: 3}\n",
			[]string{
				`t.yaml:9:18: duplicate MCP server name "fs" (first at line 8); give each server its own name: its tools are exposed as <name>__<tool>`,
				`t.yaml:12:18: duplicate mock tool "lookup" (first at line 11); give each mock tool its own name`,
				`t.yaml:13:12: a mock tool needs a name; set name to the tool's name as the agent calls it`,
			}},
		{"MCP server of no kind, fault of no tool", base + "harness:\n  builtin:\n    tools:\n      mcp: [{name: x}]\n      faults: [{kind: error, rate: 1}]\n",
			[]string{
				`t.yaml:7:14: an MCP server needs exactly one of url or command; give url for a streamable HTTP server, or command for one over stdio`,
				`t.yaml:8:17: a fault needs tool; name the tool to fail, e.g. tool: bash`,
			}},
		{"recording without dir", base + "harness:\n  builtin:\n    recording: {mode: record}\n",
			[]string{`t.yaml:6:5: recording needs dir; set dir to the directory that holds the recordings (relative to the spec file)`}},
		{"external of two kinds", base + "harness:\n  external: {address: 'localhost:1', python: 'm:C'}\n",
			[]string{`t.yaml:5:3: harness.external needs exactly one of address, command or python; set address (a harness already running), command (one to start) or python (module:Class)`}},
		{"agents without their endpoint", "dataset: {path: a}\ntarget:\n  agent:\n    http: {method: get}\n",
			[]string{
				`t.yaml:4:5: the http agent needs url; set url to the endpoint that takes a task`,
				`t.yaml:4:20: bad method "get"; use POST (the default), PUT or PATCH: the task is sent in the JSON body`,
			}},
		{"a2a without url", "dataset: {path: a}\ntarget: {agent: {a2a: {}}}\n",
			[]string{`t.yaml:2:18: the a2a agent needs url; set url to the agent's A2A endpoint, e.g. http://127.0.0.1:9999`}},
		{"mcp agent without tool", "dataset: {path: a}\ntarget: {agent: {mcp: {url: 'http://127.0.0.1:1/mcp'}}}\n",
			[]string{`t.yaml:2:18: the mcp agent needs url and tool; set url (the MCP server's streamable HTTP endpoint) and tool (the tool that takes a task)`}},
		{"responses agent without model", "dataset: {path: a}\ntarget: {agent: {responses: {base_url: 'http://127.0.0.1:1/v1'}}}\n",
			[]string{`t.yaml:2:18: the responses agent needs base_url and model; set base_url (e.g. http://127.0.0.1:8000/v1) and model`}},
		{"cli agent without command", "dataset: {path: a}\ntarget: {agent: {cli: {command: ' '}}}\n",
			[]string{`t.yaml:2:18: the cli agent needs command; set command, e.g. command: claude -p {instruction}`}},
		{"environment names", base + "environment:\n  env: {'A=B': x}\n",
			[]string{`t.yaml:5:9: bad environment variable name "A=B"; a name must not be empty or hold = or NUL`}},
		{"bad regex", base + "evaluators: [{name: regex, pattern: 'a('}]\n",
			[]string{"t.yaml:4:37: bad pattern: error parsing regexp: missing closing ): `a(`; write a Go (RE2) regular expression; YAML single quotes keep backslashes as written"}},
		{"negative temperature", "dataset: {path: a}\n" + "target: {connector: openai, model: m, temperature: -0.5}\n",
			[]string{`t.yaml:2:52: target.temperature is negative (-0.5); use 0 or a positive number`}},
		{"many at once, in file order", "trials: -2\ndataset:\n  records:\n    - {id: a, input: hi}\n    - {id: a, input: ho}\n" + tgt + "environment: {sandbox: {network: denied}}\nevaluators: [exact-matc]\n",
			[]string{
				`t.yaml:1:9: trials must be at least 1 (it is -2); trials is how many times each record runs: use 1 or more, or leave it out for 1`,
				`t.yaml:5:12: duplicate record id "a" (first at line 4); give every record a unique id`,
				`t.yaml:7:34: bad network "denied"; did you mean "deny"? use one of deny, allowlist, allow`,
				`t.yaml:8:14: unknown evaluator "exact-matc"; did you mean "exact-match"? use one of exact-match, includes, regex, json-valid, llm-judge, task-success, code-quality, policy-violations, agent-efficiency, tool-call-accuracy, trajectory-match, loops, goal-completion`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("t.yaml", []byte(tc.src))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			checkErrors(t, f.Validate(), tc.want)
		})
	}
}

// A spec parsed without a name (a request body) still says where: line
// and column, with no file name before them.
func TestValidateErrorsWithoutFileName(t *testing.T) {
	f, err := Parse("", []byte(base+"trials: -2\n"))
	if err != nil {
		t.Fatal(err)
	}
	checkErrors(t, f.Validate(), []string{`4:9: trials must be at least 1 (it is -2); trials is how many times each record runs: use 1 or more, or leave it out for 1`})
}
