package builtin

import (
	"fmt"
	"strings"

	"evals.si/agent/toolcall"
	"evals.si/model"
)

// The built-in agent's system prompt, in three parts. It is short on
// purpose: the task's instruction carries the substance, and
// harness.builtin.instructions adds what a spec wants on top. In native
// mode the middle part describes the API tools; in prompted mode the
// protocol's own section (toolcall.SystemPrompt) replaces it.
const (
	promptIntro = `You are an autonomous agent working on a task inside a sandboxed Linux environment.
Your working directory is %s; relative paths in tools resolve against it.

`
	promptNativeTools = `Use the tools to inspect files, run commands and make changes:
- bash runs a shell command in the working directory and returns its exit code, stdout and stderr.
- read_file returns a file's contents; write_file replaces a file's whole contents (creating parent directories).
- request_escalation asks for a wider sandbox policy (for example kind "network") with a reason. It may be denied; only ask when the task cannot be done otherwise.

`
	promptOutro = `Work step by step, and verify your changes by running them. Nobody will answer questions during the task, so do not ask any.
When the task is done, reply with a short summary of what you did and do not call a tool: a reply without a tool call ends the task.`
)

// systemPrompt builds the system prompt: the default (with the protocol's
// section in prompted mode), any system messages of the record's input,
// then the spec's instructions.
func systemPrompt(workdir string, proto toolcall.Protocol, tools []model.Tool, recordSystem []string, instructions string) string {
	var b strings.Builder
	fmt.Fprintf(&b, promptIntro, workdir)
	if proto.Mode == toolcall.ModePrompted {
		b.WriteString("Use the tools to inspect files, run commands and make changes.\n\n")
		b.WriteString(toolcall.SystemPrompt(proto.Format, tools))
		b.WriteString("\n")
	} else {
		b.WriteString(promptNativeTools)
	}
	b.WriteString(promptOutro)
	for _, s := range recordSystem {
		if s = strings.TrimSpace(s); s != "" {
			b.WriteString("\n\n")
			b.WriteString(s)
		}
	}
	if s := strings.TrimSpace(instructions); s != "" {
		b.WriteString("\n\n")
		b.WriteString(s)
	}
	return b.String()
}
