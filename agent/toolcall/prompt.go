package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"evals.si/model"
	"evals.si/trajectory"
)

// Tools returns the tools a format can call: fenced_shell runs shell
// commands only, so it keeps just bash; the JSON formats keep them all.
func Tools(format Format, tools []model.Tool) []model.Tool {
	if format != FormatFencedShell {
		return tools
	}
	var out []model.Tool
	for _, t := range tools {
		if t.Name == BashTool {
			out = append(out, t)
		}
	}
	return out
}

// SystemPrompt states a prompted protocol and its tools. The agent appends
// it to its system prompt; in prompted mode no tools are sent to the API.
// The wording is mandatory on purpose: small models follow "must" better
// than "may".
func SystemPrompt(format Format, tools []model.Tool) string {
	var b strings.Builder
	b.WriteString("# How to call tools\n\n")
	b.WriteString("Tools are not called through the API here. You call a tool by writing the call in your reply, in the exact format below; the harness runs it and sends you the result in the next user message.\n\n")
	switch format {
	case FormatFencedShell:
		b.WriteString("To run a shell command, you MUST write it in a fenced code block whose language is bash:\n\n```bash\npython3 -m pytest -q\n```\n\n")
		b.WriteString("Each bash, sh, shell or console block is run as one command, in order. Code blocks in any other language (python, text, diff, …) are NOT run: they are only text. Read and write files with shell commands (cat, sed, a heredoc such as cat > file <<'EOF').\n")
	case FormatNativeJSON:
		b.WriteString("To call a tool, you MUST write a JSON object with the tool's name and its arguments between <tool_call> and </tool_call>:\n\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls -la\"}}\n</tool_call>\n\n")
		b.WriteString("Write one such block per call; several calls in one reply run in order. Only these blocks are run: code blocks and other text are never executed.\n")
	default:
		b.WriteString("To call a tool, you MUST write a JSON object with the tool's name and its arguments between <tool_call> and </tool_call>:\n\n<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"ls -la\"}}</tool_call>\n\n")
		b.WriteString("A marker holding a plain shell command calls bash:\n\n<tool_call>python3 -m pytest -q</tool_call>\n\n")
		b.WriteString("Several calls in one reply run in order. Only text inside the markers is run: code blocks and other text are never executed.\n")
	}
	b.WriteString("Results come back as <tool_result name=\"TOOL\"> … </tool_result>, one per call, in the order of your calls.\n")
	b.WriteString("When the task is done, reply with a short summary and no tool call: a reply without a tool call ends the task.\n")
	if len(tools) > 0 {
		b.WriteString("\n## Tools\n")
		for _, t := range tools {
			fmt.Fprintf(&b, "\n- %s: %s\n", t.Name, t.Description)
			if format != FormatFencedShell && len(t.Parameters) > 0 {
				fmt.Fprintf(&b, "  arguments (JSON Schema): %s\n", compact(t.Parameters))
			}
		}
	}
	return b.String()
}

// ResultsMessage is the user message that carries a step's tool results
// back in prompted mode, in the order of the calls:
//
//	<tool_result name="bash" id="call_1_0">
//	exit code: 0
//	stdout:
//	…
//	</tool_result>
//
// A result that is an error has error="true". Calls that could not be read
// are listed after the results so the model can correct them.
func ResultsMessage(results []trajectory.ToolResult, problems []string) string {
	var b strings.Builder
	for i, r := range results {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "<tool_result name=%q id=%q", r.Name, r.CallID)
		if r.IsError {
			b.WriteString(` error="true"`)
		}
		b.WriteString(">\n")
		b.WriteString(strings.TrimRight(r.Output, "\n"))
		b.WriteString("\n</tool_result>\n")
	}
	if len(problems) > 0 {
		if len(results) > 0 {
			b.WriteString("\n")
		}
		b.WriteString("These tool calls could not be read and were not run; write them in the format the system message gives:\n")
		for _, p := range problems {
			fmt.Fprintf(&b, "- %s\n", p)
		}
	}
	return b.String()
}

func compact(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(out)
}
