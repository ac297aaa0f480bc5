package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"evals.si/agent"
	"evals.si/model"
	"evals.si/sandbox"
	"evals.si/trajectory"
)

// Tool names.
const (
	ToolBash              = "bash"
	ToolReadFile          = "read_file"
	ToolWriteFile         = "write_file"
	ToolRequestEscalation = "request_escalation"
)

// Output caps for what the model sees. The full streams are bounded by the
// sandbox's output limit; the model gets the head and the tail of each
// stream, because errors and test summaries usually come last.
const (
	streamHead   = 4 << 10
	streamTail   = 8 << 10
	readFileCap  = 64 << 10
	fileWriteMod = 0o644
)

// shellWrapper runs the bash tool's command under bash when the sandbox has
// it and under /bin/sh otherwise: models write bash (pipefail, [[ ]], brace
// expansion) to a tool named bash, but minimal images only have a POSIX sh.
// The command is passed as $1, never spliced into the script.
const shellWrapper = `if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; fi; exec /bin/sh -c "$1"`

func toolDefs() []model.Tool {
	return []model.Tool{
		{
			Name:        ToolBash,
			Description: "Run a shell command (bash when available, else sh) in the working directory. Returns the exit code, stdout and stderr; long output is shortened to its beginning and end.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"command":{"type":"string","description":"The command line to run."}},` +
				`"required":["command"],"additionalProperties":false}`),
		},
		{
			Name:        ToolReadFile,
			Description: "Read a text file. Relative paths resolve against the working directory.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"path":{"type":"string","description":"The file to read."}},` +
				`"required":["path"],"additionalProperties":false}`),
		},
		{
			Name:        ToolWriteFile,
			Description: "Write a file, replacing its whole contents and creating parent directories. Relative paths resolve against the working directory.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"path":{"type":"string","description":"The file to write."},` +
				`"content":{"type":"string","description":"The complete new contents of the file."}},` +
				`"required":["path","content"],"additionalProperties":false}`),
		},
		{
			Name:        ToolRequestEscalation,
			Description: "Ask the harness for a wider sandbox policy, e.g. kind \"network\" to reach the network. The harness grants or denies it; the request is recorded either way.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"kind":{"type":"string","description":"What to widen, e.g. network."},` +
				`"reason":{"type":"string","description":"Why the task needs it."}},` +
				`"required":["kind","reason"],"additionalProperties":false}`),
		},
	}
}

// toolRun carries what one tool call needs.
type toolRun struct {
	task *agent.Task
	step int
	emit func(trajectory.Event) error
	// trialTools are the trial's added tools and faults (extra.go); n
	// counts the step's calls so far.
	*trialTools
	n int
}

// dispatch runs one tool call and returns its result. A call the model got
// wrong (unknown tool, bad arguments, a file that does not exist) becomes a
// result with IsError set so the model can recover; the error return is kept
// for failures of the sandbox, the harness or the event sink.
func (r *toolRun) dispatch(ctx context.Context, tc trajectory.ToolCall) (trajectory.ToolResult, error) {
	res := trajectory.ToolResult{CallID: tc.ID, Name: tc.Name}
	fail := func(format string, args ...any) (trajectory.ToolResult, error) {
		res.IsError = true
		res.Output = fmt.Sprintf(format, args...)
		return res, nil
	}
	args := tc.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	switch tc.Name {
	case ToolBash:
		var a struct {
			Command *string `json:"command"`
		}
		if err := decodeArgs(args, &a); err != nil {
			return fail("invalid arguments for bash: %v", err)
		}
		if a.Command == nil || strings.TrimSpace(*a.Command) == "" {
			return fail(`invalid arguments for bash: "command" is required`)
		}
		return r.bash(ctx, res, *a.Command)
	case ToolReadFile:
		var a struct {
			Path *string `json:"path"`
		}
		if err := decodeArgs(args, &a); err != nil {
			return fail("invalid arguments for read_file: %v", err)
		}
		if a.Path == nil || *a.Path == "" {
			return fail(`invalid arguments for read_file: "path" is required`)
		}
		p := r.resolve(*a.Path)
		data, err := r.task.Sandbox.ReadFile(ctx, p)
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return fail("reading %s: %v", p, err)
		}
		res.Output = strings.ToValidUTF8(string(data), "\uFFFD")
		if len(data) > readFileCap {
			res.Output = strings.ToValidUTF8(string(data[:readFileCap]), "\uFFFD") +
				fmt.Sprintf("\n[file truncated: showed the first %d of %d bytes; read the rest with bash, e.g. sed -n or tail]", readFileCap, len(data))
			res.Truncated = true
		}
		return res, nil
	case ToolWriteFile:
		var a struct {
			Path    *string `json:"path"`
			Content *string `json:"content"`
		}
		if err := decodeArgs(args, &a); err != nil {
			return fail("invalid arguments for write_file: %v", err)
		}
		if a.Path == nil || *a.Path == "" {
			return fail(`invalid arguments for write_file: "path" is required`)
		}
		if a.Content == nil {
			return fail(`invalid arguments for write_file: "content" is required`)
		}
		p := r.resolve(*a.Path)
		if err := r.task.Sandbox.WriteFile(ctx, p, []byte(*a.Content), fileWriteMod); err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return fail("writing %s: %v", p, err)
		}
		res.Output = fmt.Sprintf("wrote %d bytes to %s", len(*a.Content), p)
		return res, nil
	case ToolRequestEscalation:
		var a struct {
			Kind   *string `json:"kind"`
			Reason *string `json:"reason"`
		}
		if err := decodeArgs(args, &a); err != nil {
			return fail("invalid arguments for request_escalation: %v", err)
		}
		if a.Kind == nil || strings.TrimSpace(*a.Kind) == "" {
			return fail(`invalid arguments for request_escalation: "kind" is required`)
		}
		if a.Reason == nil {
			return fail(`invalid arguments for request_escalation: "reason" is required`)
		}
		return r.escalate(ctx, res, strings.TrimSpace(*a.Kind), *a.Reason)
	default:
		return r.callExtra(ctx, tc)
	}
}

func (r *toolRun) resolve(p string) string {
	if path.IsAbs(p) || r.task.Workdir == "" {
		return path.Clean(p)
	}
	return path.Join(r.task.Workdir, p)
}

func (r *toolRun) bash(ctx context.Context, res trajectory.ToolResult, command string) (trajectory.ToolResult, error) {
	req := sandbox.ExecRequest{
		Argv:        []string{"/bin/sh", "-c", shellWrapper, "sh", command},
		Workdir:     r.task.Workdir,
		Timeout:     r.task.CommandTimeout,
		OutputLimit: r.task.OutputLimit,
	}
	out, err := r.task.Sandbox.Exec(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, fmt.Errorf("running bash tool command in the sandbox: %w", err)
	}
	for _, d := range out.Denials {
		if err := r.emit(trajectory.Event{Kind: trajectory.KindPolicy, Step: r.step,
			Policy: &trajectory.Policy{Kind: d.Kind, Detail: d.Detail}}); err != nil {
			return res, err
		}
	}
	code := out.ExitCode
	res.ExitCode = &code

	var b strings.Builder
	fmt.Fprintf(&b, "exit code: %d\n", out.ExitCode)
	if out.TimedOut {
		if r.task.CommandTimeout > 0 {
			fmt.Fprintf(&b, "[the command timed out after %s and was killed]\n", r.task.CommandTimeout)
		} else {
			b.WriteString("[the command timed out and was killed]\n")
		}
	}
	for _, d := range out.Denials {
		if d.Kind != "timeout" {
			fmt.Fprintf(&b, "[the sandbox stopped or refused something: %s %s]\n", d.Kind, d.Detail)
		}
	}
	limit := sandbox.OutputLimit(req)
	for _, s := range []struct {
		name string
		data []byte
	}{{"stdout", out.Stdout}, {"stderr", out.Stderr}} {
		if len(s.data) == 0 {
			continue
		}
		text, cut := headTail(s.data, streamHead, streamTail)
		fmt.Fprintf(&b, "%s:\n%s", s.name, text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteString("\n")
		}
		if out.Truncated && len(s.data) >= limit {
			fmt.Fprintf(&b, "[%s was cut by the sandbox at %d bytes]\n", s.name, limit)
			cut = true
		}
		res.Truncated = res.Truncated || cut
	}
	if len(out.Stdout) == 0 && len(out.Stderr) == 0 {
		b.WriteString("(no output)\n")
	}
	res.Output = b.String()
	return res, nil
}

func (r *toolRun) escalate(ctx context.Context, res trajectory.ToolResult, kind, reason string) (trajectory.ToolResult, error) {
	granted := false
	if r.task.Escalate != nil {
		g, err := r.task.Escalate(ctx, kind, reason)
		if err != nil {
			return res, fmt.Errorf("deciding escalation %q: %w", kind, err)
		}
		granted = g
	}
	if err := r.emit(trajectory.Event{Kind: trajectory.KindEscalation, Step: r.step,
		Escalation: &trajectory.Escalation{Kind: kind, Reason: reason, Granted: granted}}); err != nil {
		return res, err
	}
	if granted {
		res.Output = fmt.Sprintf("granted: the sandbox policy now allows %s for the rest of this task", kind)
	} else {
		res.Output = fmt.Sprintf("denied: the harness does not grant %s escalations for this task; continue without it", kind)
	}
	return res, nil
}

// decodeArgs decodes a tool call's JSON arguments object. Unknown fields are
// ignored: models add them, and they harm nothing.
func decodeArgs(raw json.RawMessage, v any) error {
	if !json.Valid(raw) {
		return errors.New("the arguments are not valid JSON; send a JSON object")
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return errors.New("the arguments must be a JSON object")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("the arguments do not match the tool's schema: %v", err)
	}
	return nil
}

// headTail returns data as valid UTF-8 text, shortened to its first head and
// last tail bytes with a note in between when it is longer.
func headTail(data []byte, head, tail int) (string, bool) {
	if len(data) <= head+tail {
		return strings.ToValidUTF8(string(data), "\uFFFD"), false
	}
	omitted := len(data) - head - tail
	return strings.ToValidUTF8(string(data[:head]), "\uFFFD") +
		fmt.Sprintf("\n[... %d bytes omitted ...]\n", omitted) +
		strings.ToValidUTF8(string(data[len(data)-tail:]), "\uFFFD"), true
}

// since is the duration from start in whole milliseconds.
func since(start time.Time) int64 { return time.Since(start).Milliseconds() }
