package access

import (
	"errors"
	"strings"
	"testing"

	"evals.si/spec"
)

// TestCheckPrograms proves a spec may run on the worker only what the
// config lists, exactly as listed, plus the product's own evalsi_* code
// and the checker's built-in parsers, and that refusals name the field, the
// program and the config key.
func TestCheckPrograms(t *testing.T) {
	const head = "dataset: {records: [{id: r1, input: x}]}\ntarget: {connector: openai, model: m}\n"
	mcp := func(server string) string { return head + "harness: {builtin: {tools: {mcp: [" + server + "]}}}\n" }
	ext := func(form string) string { return head + "harness: {external: {" + form + "}}\n" }
	parser := func(p string) string {
		return head + "harness: {builtin: {}}\nenvironment: {checker: {command: [true], parser: '" + p + "'}}\n"
	}
	tests := []struct {
		name   string
		yaml   string
		config func(*Agents)
		want   []string // nil: allowed; else substrings of the refusal
	}{
		{"untrusted stdio MCP command", mcp(`{name: s, command: [node, server.js]}`), nil,
			[]string{`harness.builtin.tools.mcp[0].command: the stdio MCP server command ["node", "server.js"] is not trusted: add it to agents.trusted_commands`}},
		{"the same command trusted when listed", mcp(`{name: s, command: [node, server.js]}`),
			func(a *Agents) { a.TrustedCommands = append(a.TrustedCommands, []string{"node", "server.js"}) }, nil},
		{"the listed filesystem server", mcp(`{name: fs, command: [npx, -y, "@modelcontextprotocol/server-filesystem"]}`), nil, nil},
		{"extra arguments are not allowed by default", mcp(`{name: fs, command: [npx, -y, "@modelcontextprotocol/server-filesystem", /]}`), nil,
			[]string{`["npx", "-y", "@modelcontextprotocol/server-filesystem", "/"] is not trusted`}},
		{"extra arguments after an entry ending in ...", mcp(`{name: fs, command: [npx, -y, "@modelcontextprotocol/server-filesystem", /data]}`),
			func(a *Agents) {
				a.TrustedCommands = [][]string{{"npx", "-y", "@modelcontextprotocol/server-filesystem", "..."}}
			}, nil},
		{"... still needs the whole prefix", mcp(`{name: fs, command: [npx, -y]}`),
			func(a *Agents) {
				a.TrustedCommands = [][]string{{"npx", "-y", "@modelcontextprotocol/server-filesystem", "..."}}
			}, []string{`["npx", "-y"] is not trusted`}},
		{"argv[0] is compared as written", mcp(`{name: fs, command: [/usr/bin/npx, -y, "@modelcontextprotocol/server-filesystem"]}`), nil,
			[]string{`["/usr/bin/npx", "-y", "@modelcontextprotocol/server-filesystem"] is not trusted`}},
		{"a shorter command is not the entry", mcp(`{name: fs, command: [npx, -y]}`), nil, []string{`is not trusted`}},
		{"a streamable HTTP server runs nothing", mcp(`{name: h, url: 'http://127.0.0.1:1/mcp'}`), nil, nil},
		{"a trusted command's env is refused", mcp(`{name: fs, command: [npx, -y, "@modelcontextprotocol/server-filesystem"], env: {NODE_OPTIONS: "--require /tmp/x.js", npm_config_registry: "http://evil"}}`), nil,
			[]string{"harness.builtin.tools.mcp[0].env: sets NODE_OPTIONS", "add NODE_OPTIONS to agents.trusted_env", "sets npm_config_registry"}},
		{"env listed in trusted_env", mcp(`{name: fs, command: [npx, -y, "@modelcontextprotocol/server-filesystem"], env: {FS_READONLY: "1"}}`),
			func(a *Agents) { a.TrustedEnv = []string{"FS_READONLY"} }, nil},
		{"untrusted external harness command", ext(`command: [./harness, --serve]`), nil,
			[]string{`harness.external.command: the external harness command ["./harness", "--serve"] is not trusted: add it to agents.trusted_commands`}},
		{"trusted external harness command", ext(`command: [/opt/h/bin/harness, --serve]`),
			func(a *Agents) { a.TrustedCommands = [][]string{{"/opt/h/bin/harness", "--serve"}} }, nil},
		{"an address runs nothing", ext(`address: '127.0.0.1:7000'`), nil, nil},
		{"evalsi_ python class always allowed", ext(`python: 'evalsi_taubench:TauBenchHarness'`), nil, nil},
		{"evalsi_ dotted module allowed", ext(`python: 'evalsi_bfcl.harness:BFCLHarness'`), nil, nil},
		{"listed python class", ext(`python: 'my_company.harness:Harness'`), nil, nil},
		{"unlisted python class", ext(`python: 'other.harness:Harness'`), nil,
			[]string{`harness.external.python: the Python harness class "other.harness:Harness" is not trusted: add it to agents.trusted_python`}},
		{"a look-alike of a listed class", ext(`python: 'my_company.harness:Harness2'`), nil, []string{"is not trusted"}},
		{"an evalsi_ file path is not the product's", ext(`python: 'evalsi_x/../../tmp/h.py:Harness'`), nil, []string{"is not trusted"}},
		{"an evalsi_ file in the spec's directory", ext(`python: 'evalsi_h.py:Harness'`), nil, []string{"is not trusted"}},
		{"a module merely starting evalsi", ext(`python: 'evalsi.harness:Harness'`), nil, []string{"is not trusted"}},
		{"default parser", head + "harness: {builtin: {}}\nenvironment: {checker: {command: [true]}}\n", nil, nil},
		{"json parser", parser("json"), nil, nil},
		{"junit parser", parser("junit:reports/junit.xml"), nil, nil},
		{"registered evalsi_ parser", parser("evalsi_swebench:grade"), nil, nil},
		{"unlisted module:function parser", parser("my_grader:parse"), nil,
			[]string{`environment.checker.parser: the checker parser "my_grader:parse" is not trusted: use exit-code, json or junit:<path>, or add it to agents.trusted_python`}},
		{"listed module:function parser", parser("my_grader:parse"), func(a *Agents) { a.TrustedPython = []string{"my_grader:parse"} }, nil},
		{"a record's parser", "dataset: {records: [{id: r1, input: x, metadata: {environment: {checker: {parser: 'evil_mod:run'}}}}]}\ntarget: {connector: openai, model: m}\nharness: {builtin: {}}\n", nil,
			[]string{`dataset.records[0] ("r1") metadata.environment.checker.parser: the checker parser "evil_mod:run" is not trusted`}},
		{"a record's evalsi_ parser", "dataset: {records: [{id: r1, input: x, metadata: {environment: {checker: {parser: 'evalsi_harbor:reward'}}}}]}\ntarget: {connector: openai, model: m}\nharness: {builtin: {}}\n", nil, nil},
		{"every refusal at once", head + "harness: {builtin: {tools: {mcp: [{name: a, command: [sh, -c, id]}, {name: b, command: [python3, x.py]}]}}}\nenvironment: {checker: {command: [true], parser: 'x:y'}}\n", nil,
			[]string{"mcp[0].command", "mcp[1].command", "environment.checker.parser"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			if tt.config != nil {
				tt.config(&cfg.Agents)
			}
			a := newAccess(t, cfg)
			err := a.CheckPrograms(WorkerPrograms(parseSpec(t, tt.yaml)))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("allowed; want a refusal containing %q", tt.want)
			}
			if !errors.Is(err, ErrUntrusted) || !errors.Is(err, ErrDenied) {
				t.Errorf("%v wraps neither ErrUntrusted nor ErrDenied", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestRecordPrograms proves a worker can check records it loaded itself,
// and that a metadata.environment it cannot read is refused, not skipped.
func TestRecordPrograms(t *testing.T) {
	a := newAccess(t, testConfig())
	rec := func(env string) spec.Record {
		return spec.Record{ID: "t1", Metadata: map[string]spec.JSON{"environment": spec.JSON(env)}}
	}
	tests := []struct {
		env  string
		want string // "" allowed
	}{
		{`{"image": "x"}`, ""},
		{`{"checker": {"parser": "evalsi_terminalbench:pytest"}}`, ""},
		{`{"checker": {"parser": null}}`, ""},
		{`{"checker": {"parser": "pwn:it"}}`, `record "t1" metadata.environment.checker.parser: the checker parser "pwn:it" is not trusted`},
		{`{"checker": {"parser": 7}}`, `not a string`},
		{`[1]`, `unreadable`},
	}
	for _, tt := range tests {
		err := a.CheckPrograms(RecordPrograms(rec(tt.env)))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.env, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want a refusal containing %q", tt.env, err, tt.want)
		}
	}
	if p := RecordPrograms(spec.Record{ID: "plain"}); len(p) != 0 {
		t.Errorf("a record without metadata.environment: %v", p)
	}
}
