package toolcall

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"evals.si/model"
	"evals.si/trajectory"
)

// c builds an expected call; args is a Go value marshalled to JSON.
type want struct {
	name string
	args any
}

func sh(cmd string) want { return want{BashTool, map[string]any{"command": cmd}} }

func check(t *testing.T, got Parsed, wantCalls []want, wantProblems int) {
	t.Helper()
	if len(got.Calls) != len(wantCalls) {
		t.Fatalf("got %d calls %s, want %d %v (problems %q)", len(got.Calls), show(got.Calls), len(wantCalls), wantCalls, got.Problems)
	}
	for i, w := range wantCalls {
		g := got.Calls[i]
		if g.Name != w.name {
			t.Errorf("call %d: name %q, want %q", i, g.Name, w.name)
		}
		var gv, wv any
		if err := json.Unmarshal(g.Arguments, &gv); err != nil {
			t.Errorf("call %d: arguments %s are not JSON: %v", i, g.Arguments, err)
			continue
		}
		wb, _ := json.Marshal(w.args)
		_ = json.Unmarshal(wb, &wv)
		if !reflect.DeepEqual(gv, wv) {
			t.Errorf("call %d: arguments\n got %s\nwant %s", i, g.Arguments, wb)
		}
	}
	if len(got.Problems) != wantProblems {
		t.Errorf("problems %q, want %d", got.Problems, wantProblems)
	}
}

func show(calls []trajectory.ToolCall) string {
	var s []string
	for _, c := range calls {
		s = append(s, fmt.Sprintf("%s(%s)", c.Name, c.Arguments))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

type row struct {
	name     string
	text     string
	calls    []want
	problems int
}

func TestParseTags(t *testing.T) {
	rows := []row{
		{"json call", `Let me look.
<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>`, []want{sh("ls -la")}, 0},
		{"bare shell command", "<tool_call>\npython3 -m pytest -q\n</tool_call>", []want{sh("python3 -m pytest -q")}, 0},
		{"every marker in document order", `First the tests, then the file.
<tool_call>python3 -m pytest -q</tool_call>
<tool_call>{"name": "read_file", "arguments": {"path": "calc.py"}}</tool_call>
and finally
<tool_call>git status --short</tool_call>`,
			[]want{sh("python3 -m pytest -q"), {"read_file", map[string]any{"path": "calc.py"}}, sh("git status --short")}, 0},
		{"truncated final call (closing marker cut at the stop)", "I'll run it.\n<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"make test\"}}",
			[]want{sh("make test")}, 0},
		{"truncated bare command with a partial closing marker", "<tool_call>ls /workspace</tool_", []want{sh("ls /workspace")}, 0},
		{"empty markers dropped", "<tool_call></tool_call>\n<tool_call>  \n </tool_call><tool_call>pwd</tool_call>", []want{sh("pwd")}, 0},
		{"special-token trailers stripped", "<tool_call>{\"name\":\"bash\",\"arguments\":{\"command\":\"id\"}}</tool_call><|im_end|>", []want{sh("id")}, 0},
		{"special token inside the body of a truncated call", "<tool_call>uname -a<|eot_id|>", []want{sh("uname -a")}, 0},
		{"special token before the close", "<tool_call>whoami</s></tool_call>", []want{sh("whoami")}, 0},
		{"python fence is inert", "Here is the fix:\n```python\nimport os\nos.system('rm -rf /')\n```\nNo tool call needed.", nil, 0},
		{"bash fence is inert in this format", "Run this:\n```bash\nrm -rf /workspace\n```", nil, 0},
		{"marker quoted in backticks is prose", "I will wrap calls in `<tool_call>` markers, like `<tool_call>ls</tool_call>`.", nil, 0},
		{"no marker at all", "All tests pass now. I fixed add() and mean().", nil, 0},
		{"close marker inside a JSON string does not cut the call", `<tool_call>{"name": "write_file", "arguments": {"path": "notes.md", "content": "use </tool_call> to end {a call}"}}</tool_call>`,
			[]want{{"write_file", map[string]any{"path": "notes.md", "content": "use </tool_call> to end {a call}"}}}, 0},
		{"nested braces and escaped quotes in strings", `<tool_call>{"name": "bash", "arguments": {"command": "python3 -c \"print({'a': [1, {2}]})\""}}</tool_call>`,
			[]want{sh(`python3 -c "print({'a': [1, {2}]})"`)}, 0},
		{"invalid escape before $ repaired", `<tool_call>{"name": "bash", "arguments": {"command": "echo \$HOME && sed -i 's/a\.b/c/' f"}}</tool_call>`,
			[]want{sh(`echo \$HOME && sed -i 's/a\.b/c/' f`)}, 0},
		{"raw newline in a JSON string repaired", "<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"cat > f <<'EOF'\nhi\nEOF\"}}</tool_call>",
			[]want{sh("cat > f <<'EOF'\nhi\nEOF")}, 0},
		{"arguments as a JSON string", `<tool_call>{"name": "bash", "arguments": "{\"command\": \"ls\"}"}</tool_call>`, []want{sh("ls")}, 0},
		{"parameters instead of arguments", `<tool_call>{"name": "read_file", "parameters": {"path": "a"}}</tool_call>`, []want{{"read_file", map[string]any{"path": "a"}}}, 0},
		{"shell brace group is a command", "<tool_call>{ echo a; echo b; } > out.txt</tool_call>", []want{sh("{ echo a; echo b; } > out.txt")}, 0},
		{"broken JSON is a problem, not a command", `<tool_call>{"name": "bash", "arguments": {"command": "ls"}</tool_call>`, nil, 1},
		{"fenced body unwrapped", "<tool_call>\n```bash\nls -1\n```\n</tool_call>", []want{sh("ls -1")}, 0},
		{"second opening marker ends an unclosed call", "<tool_call>ls\n<tool_call>pwd</tool_call>", []want{sh("ls"), sh("pwd")}, 0},
		{"case-sensitive strict markers", "<TOOL_CALL>ls</TOOL_CALL> <bash>ls</bash>", nil, 0},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) { check(t, ParseTags(r.text), r.calls, r.problems) })
	}
}

func TestParseFencedShell(t *testing.T) {
	rows := []row{
		{"bash fence", "Let me run the tests.\n```bash\npython3 -m pytest -q\n```", []want{sh("python3 -m pytest -q")}, 0},
		{"each fence one call, in order", "```sh\ncat calc.py\n```\nthen\n```shell\ngit diff\n```", []want{sh("cat calc.py"), sh("git diff")}, 0},
		{"multi-line block is one call", "```bash\ncd src\nmake\n```", []want{sh("cd src\nmake")}, 0},
		{"python fence is inert", "```python\nimport shutil; shutil.rmtree('/')\n```", nil, 0},
		{"fence without language is inert", "```\nrm -rf /\n```", nil, 0},
		{"diff and text fences are inert", "```diff\n-a\n+b\n```\n```text\nls\n```", nil, 0},
		{"prose mentioning bash is inert", "You could run `ls` in bash, or bash -c 'ls'.", nil, 0},
		{"console prompts stripped and output dropped", "```console\n$ python3 -m pytest -q\n2 failed\n$ git status \\\n  --short\n M calc.py\n# whoami\nroot\n```",
			[]want{sh("python3 -m pytest -q\ngit status \\\n  --short\nwhoami")}, 0},
		{"console without prompts is all commands", "```console\nls -la\n```", []want{sh("ls -la")}, 0},
		{"dollar prompts in a bash fence", "```bash\n$ ls\n$ pwd\n```", []want{sh("ls\npwd")}, 0},
		{"comments kept in a bash fence", "```bash\n# list files\nls\n```", []want{sh("# list files\nls")}, 0},
		{"language is case-insensitive with attributes", "```Bash title=run\necho hi\n```", []want{sh("echo hi")}, 0},
		{"tilde fence and longer closing fence", "~~~sh\necho ~\n~~~~", []want{sh("echo ~")}, 0},
		{"nested shorter fence stays inside", "````bash\ncat <<'EOF'\n```\nEOF\n````", []want{sh("cat <<'EOF'\n```\nEOF")}, 0},
		{"truncated final fence counts", "```bash\npython3 -m pytest -q", []want{sh("python3 -m pytest -q")}, 0},
		{"special-token trailer stripped", "```bash\nls\n```<|im_end|>", []want{sh("ls")}, 0},
		{"empty fence dropped", "```bash\n\n```", nil, 0},
		{"tags are inert in this format", "<tool_call>ls</tool_call>", nil, 0},
		{"indented fence in a list", "1. Run:\n   ```bash\n   make\n   ```", []want{sh("make")}, 0},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) { check(t, ParseFencedShell(r.text), r.calls, r.problems) })
	}
}

func TestParseNativeJSON(t *testing.T) {
	rows := []row{
		{"llama python_tag", `<|python_tag|>{"name": "bash", "parameters": {"command": "ls"}}<|eom_id|>`, []want{sh("ls")}, 0},
		{"python_tag with several calls", `<|python_tag|>{"name": "bash", "parameters": {"command": "ls"}}; {"name": "read_file", "parameters": {"path": "x"}}`,
			[]want{sh("ls"), {"read_file", map[string]any{"path": "x"}}}, 0},
		{"hermes tool_call", "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"pytest -q\"}}\n</tool_call><|im_end|>", []want{sh("pytest -q")}, 0},
		{"hermes several calls", "<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"a\"}}</tool_call>\n<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"b\"}}</tool_call>",
			[]want{sh("a"), sh("b")}, 0},
		{"hermes with a bare command is a problem", "<tool_call>ls</tool_call>", nil, 1},
		{"bare JSON reply", `{"name": "bash", "arguments": {"command": "git status"}}`, []want{sh("git status")}, 0},
		{"bare JSON array", `[{"name": "bash", "arguments": {"command": "a"}}, {"name": "bash", "arguments": {"command": "b"}}]`, []want{sh("a"), sh("b")}, 0},
		{"openai function shape", `{"type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}`, []want{sh("ls")}, 0},
		{"JSON inside prose is inert", `To call a tool you would write {"name": "bash", "arguments": {"command": "rm -rf /"}} but I am done.`, nil, 0},
		{"JSON that is not a call is inert", `{"status": "done", "summary": "fixed"}`, nil, 0},
		{"python fence is inert", "```python\nprint({'name': 'bash'})\n```", nil, 0},
		{"json fence is inert", "```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n```", nil, 0},
		{"invalid escapes repaired", `<|python_tag|>{"name": "bash", "parameters": {"command": "grep -n \"def \(add\|mean\)\" calc.py; echo \$?"}}`,
			[]want{sh(`grep -n "def \(add\|mean\)" calc.py; echo \$?`)}, 0},
		{"braces and close marker in strings", `<tool_call>{"name": "write_file", "arguments": {"path": "t.py", "content": "d = {\"k\": \"}\"}\n# </tool_call>\n"}}</tool_call>`,
			[]want{{"write_file", map[string]any{"path": "t.py", "content": "d = {\"k\": \"}\"}\n# </tool_call>\n"}}}, 0},
		{"truncated hermes call", "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n", []want{sh("ls")}, 0},
		{"plain answer", "Done: both bugs are fixed.<|eot_id|>", nil, 0},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) { check(t, ParseNativeJSON(r.text), r.calls, r.problems) })
	}
}

func TestParseUnknownFormat(t *testing.T) {
	if _, err := Parse("xml", "x"); err == nil || !strings.Contains(err.Error(), "tool_call_tags") {
		t.Fatalf("err = %v, want an error naming the formats", err)
	}
	p, err := Parse(FormatTags, "<tool_call>ls</tool_call>")
	if err != nil || len(p.Calls) != 1 {
		t.Fatalf("Parse(tags) = %v, %v", p, err)
	}
}

func TestRepairJSON(t *testing.T) {
	for in, want := range map[string]string{
		`{"a": "x\$y"}`:     `x\$y`,
		`{"a": "\u00e9"}`:   "é",
		`{"a": "\u00zz"}`:   `\u00zz`,
		"{\"a\": \"x\ty\"}": "x\ty",
		`{"a": "C:\new"}`:   "C:\new", // a valid escape stays one
	} {
		raw, ok := repairJSON(in)
		if !ok {
			t.Errorf("repairJSON(%q) failed", in)
			continue
		}
		var v map[string]string
		if err := json.Unmarshal(raw, &v); err != nil || v["a"] != want {
			t.Errorf("repairJSON(%q) = %s (%q), want %q", in, raw, v["a"], want)
		}
	}
	if _, ok := repairJSON(`{"a": }`); ok {
		t.Error("repairJSON accepted broken structure")
	}
}

func TestPromptsNameProtocolAndTools(t *testing.T) {
	tools := []model.Tool{
		{Name: "bash", Description: "Run a command.", Parameters: json.RawMessage(`{"type": "object", "properties": {"command": {"type": "string"}}}`)},
		{Name: "read_file", Description: "Read a file."},
	}
	if p := SystemPrompt(FormatTags, tools); !strings.Contains(p, `- bash: Run a command.`) || !strings.Contains(p, `{"properties":{"command":{"type":"string"}},"type":"object"}`) {
		t.Errorf("tags prompt does not list the tools with their schemas:\n%s", p)
	}
	if got := Tools(FormatFencedShell, tools); len(got) != 1 || got[0].Name != "bash" {
		t.Errorf("fenced_shell tools = %v, want bash only", got)
	}
	if got := Tools(FormatTags, tools); len(got) != 2 {
		t.Errorf("tags tools = %v, want all", got)
	}
	for _, f := range []Format{FormatTags, FormatFencedShell, FormatNativeJSON} {
		p := SystemPrompt(f, nil)
		if !strings.Contains(p, "no tool call") {
			t.Errorf("%s prompt does not say how to finish:\n%s", f, p)
		}
	}
	if p := SystemPrompt(FormatTags, nil); !strings.Contains(p, "<tool_call>python3 -m pytest -q</tool_call>") {
		t.Errorf("tags prompt lacks the bare command form:\n%s", p)
	}
	if p := SystemPrompt(FormatFencedShell, nil); !strings.Contains(p, "```bash") || !strings.Contains(p, "NOT run") {
		t.Errorf("fenced prompt:\n%s", p)
	}
	// The example in each prompt parses under its own format.
	for _, f := range []Format{FormatTags, FormatFencedShell, FormatNativeJSON} {
		p, _ := Parse(f, SystemPrompt(f, nil))
		if len(p.Calls) == 0 {
			t.Errorf("%s: the prompt's own example does not parse", f)
		}
	}
	msg := ResultsMessage([]trajectory.ToolResult{{CallID: "call_1_0", Name: "bash", Output: "exit code: 0\n"}, {CallID: "call_1_1", Name: "nope", Output: "unknown tool", IsError: true}}, []string{"bad call"})
	for _, s := range []string{`<tool_result name="bash" id="call_1_0">` + "\nexit code: 0\n</tool_result>", `error="true"`, "- bad call"} {
		if !strings.Contains(msg, s) {
			t.Errorf("results message lacks %q:\n%s", s, msg)
		}
	}
}
