// Package checker grades a task's end state: it writes the checker's files,
// runs its command in the sandbox and turns the result into a Verdict with a
// parser. It also captures the agent's change as a git diff (diff.go).
//
// A checker that cannot run is an *InfraError (errors.As-able), never a
// failed verdict: the checker command's own timeout, exit 126 or 127 (not
// executable, not found), files that cannot be written, a parser that finds
// no parsable output. A failing test is Pass=false with no error. Its Cause
// lets the engine tell a checker that cannot run at all (checked once per
// environment, before any agent) from one an agent broke.
package checker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"evals.si/sandbox"
	"evals.si/spec"
)

// DefaultTimeout bounds the checker command when checker.timeout is unset.
const DefaultTimeout = 10 * time.Minute

// outputCap bounds Verdict.Output; the tail is kept, where test runners put
// their summaries.
const outputCap = 64 << 10

// Sandbox is the part of sandbox.Sandbox the checker uses.
type Sandbox interface {
	Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error)
	ReadFile(ctx context.Context, path string) ([]byte, error)
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
}

// Verdict is the checker's grade of the end state.
type Verdict struct {
	Pass bool
	// Score is in [0, 1].
	Score   float64
	Details string
	// ExitCode and Output (stdout then stderr, the last 64 KiB) are the
	// checker command's.
	ExitCode int
	Output   string
}

// InfraError is a checker that could not run or could not be read. On an
// untouched environment that is an infrastructure error (the trial
// errored, the task did not fail); after an agent, whether it is depends
// on Cause (see AgentCausable).
type InfraError struct {
	// Reason says what went wrong, for people.
	Reason string
	// Err is the underlying error, if any.
	Err error
	// Cause is where it went wrong: CauseFiles, CauseStart, CauseTimeout,
	// CauseParser or CauseSandbox.
	Cause string
}

// Causes of an InfraError.
const (
	// CauseFiles: a checker file could not be written.
	CauseFiles = "files"
	// CauseStart: the command could not be started (exit 126 or 127).
	CauseStart = "start"
	// CauseTimeout: the command ran past the checker's timeout.
	CauseTimeout = "timeout"
	// CauseParser: the parser found no verdict in what the command left.
	CauseParser = "parser"
	// CauseSandbox: the sandbox itself failed to run the command.
	CauseSandbox = "sandbox"
)

// AgentCausable reports whether the sandbox's state explains the failure
// (files, interpreter, output, a command that hangs): an agent can bring
// that about, so a checker that ran on the untouched environment and fails
// this way after the agent is the agent's failure. A sandbox that failed
// to run the command is not.
func (e *InfraError) AgentCausable() bool { return e.Cause != CauseSandbox }

// Error is the reason, with no "checker" prefix: the engine files it under
// the error kind checker, shown beside the message, and says when the
// checker could not run (before or after the agent).
func (e *InfraError) Error() string {
	if e.Err != nil {
		return e.Reason + ": " + e.Err.Error()
	}
	return e.Reason
}

func (e *InfraError) Unwrap() error { return e.Err }

func infraf(cause, format string, args ...any) *InfraError {
	return &InfraError{Reason: fmt.Sprintf(format, args...), Cause: cause}
}

// Run writes cfg.Files (relative paths under workdir, absolute ones as
// they are) as the sandbox's root, as a Dockerfile's COPY writes them,
// runs cfg.Command in workdir as cfg.User (empty: the sandbox's default
// user; the engine fills in environment.user) with cfg.Timeout (default
// 10m) and parses the result with cfg.Parser (default exit-code), which
// gets cfg.ParserArgs. cfg.Network, Fresh and PatchFile are the engine's:
// it picks the sandbox and puts the patch among the files. An unknown parser
// or an empty command is a plain error (a spec error the engine should have
// caught with reg.Has); a checker that cannot run is an *InfraError.
func Run(ctx context.Context, sb Sandbox, cfg spec.Checker, workdir string, reg *Registry) (Verdict, error) {
	if len(cfg.Command) == 0 {
		return Verdict{}, errors.New("environment.checker.command is empty: give the command that grades the task, e.g. [python3, -m, pytest, -q]")
	}
	if reg == nil {
		reg = NewRegistry()
	}
	parserName := cfg.Parser
	if parserName == "" {
		parserName = ParserExitCode
	}
	parse, err := reg.Lookup(parserName)
	if err != nil {
		return Verdict{}, err
	}

	if err := writeFiles(ctx, sb, cfg.Files, workdir); err != nil {
		return Verdict{}, err
	}
	// As the sandbox's own user (root), like the file writes.
	for i, cmd := range cfg.Setup {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", cmd}, Workdir: workdir, Timeout: time.Minute})
		if err != nil {
			return Verdict{}, &InfraError{Reason: fmt.Sprintf("running checker setup step %d", i+1), Err: err, Cause: CauseSandbox}
		}
		if res.ExitCode != 0 || res.TimedOut {
			return Verdict{}, infraf(CauseFiles, "checker setup step %d (%q) exited %d: %s", i+1, cmd, res.ExitCode, snippet(tail(append(res.Stdout, res.Stderr...), outputCap)))
		}
	}

	timeout := cfg.Timeout.D()
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: cfg.Command, Workdir: workdir, User: cfg.User, Timeout: timeout})
	if err != nil {
		if ctx.Err() != nil {
			return Verdict{}, fmt.Errorf("running the checker: %w", ctx.Err())
		}
		return Verdict{}, &InfraError{Reason: fmt.Sprintf("running %q in the sandbox", cfg.Command), Err: err, Cause: CauseSandbox}
	}
	out := tail(append(append([]byte(nil), res.Stdout...), res.Stderr...), outputCap)
	switch {
	case res.TimedOut:
		return Verdict{}, infraf(CauseTimeout, "the checker command %q timed out after %s (raise environment.checker.timeout if it needs longer); output: %s", cfg.Command, timeout, snippet(out))
	case res.ExitCode == 126:
		return Verdict{}, infraf(CauseStart, "the checker command %q could not be executed (exit 126: not executable); output: %s", cfg.Command, snippet(out))
	case res.ExitCode == 127:
		return Verdict{}, infraf(CauseStart, "the checker command %q could not be started (exit 127: not found or not executable): is its interpreter installed in the image? output: %s", cfg.Command, snippet(out))
	}

	v, err := parse(ctx, res, sb, workdir, cfg.ParserArgs)
	if err != nil {
		var ie *InfraError
		if errors.As(err, &ie) {
			// A parser that says where it went wrong (the sandbox failed
			// reading its output, say) keeps that cause.
			cause := ie.Cause
			if cause == "" {
				cause = CauseParser
			}
			return Verdict{}, &InfraError{Reason: ie.Reason, Err: ie.Err, Cause: cause}
		}
		return Verdict{}, &InfraError{Reason: "parser " + parserName, Err: err, Cause: CauseParser}
	}
	if v.Score < 0 || v.Score > 1 {
		return Verdict{}, infraf(CauseParser, "parser %s returned score %v, outside [0, 1]", parserName, v.Score)
	}
	v.ExitCode = res.ExitCode
	v.Output = out
	return v, nil
}

// writeFiles writes the checker's files. The engine owns their paths:
// whatever the agent left there (a directory, a symlink, a FIFO) is
// removed first, inside the sandbox, so it cannot make the checker fail to
// start or block writing. What cannot be removed or written is a
// CauseFiles error.
func writeFiles(ctx context.Context, sb Sandbox, files map[string]string, workdir string) error {
	if len(files) == 0 {
		return nil
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic order, so failures are reproducible
	paths := make([]string, len(names))
	for i, name := range names {
		paths[i] = resolve(workdir, name)
	}
	// rm -rf does not follow a symlink at the path, and removes a
	// directory tree or a FIFO without opening it. Its result is not
	// checked: what it could not clear, writing reports.
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: append([]string{"rm", "-rf", "--"}, paths...), Workdir: "/", Timeout: time.Minute}); err != nil && ctx.Err() != nil {
		return fmt.Errorf("clearing the checker's file paths: %w", ctx.Err())
	}
	for i, p := range paths {
		if err := sb.WriteFile(ctx, p, []byte(files[names[i]]), 0o644); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("writing checker file %s: %w", p, ctx.Err())
			}
			return &InfraError{Reason: "writing checker file " + p, Err: err, Cause: CauseFiles}
		}
	}
	return nil
}

// resolve makes a sandbox path absolute: relative paths are under workdir.
func resolve(workdir, p string) string {
	if path.IsAbs(p) || workdir == "" {
		return path.Clean(p)
	}
	return path.Join(workdir, p)
}

// tail returns the last n bytes of b as text, with a note when cut.
func tail(b []byte, n int) string {
	if len(b) <= n {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return fmt.Sprintf("[... first %d bytes omitted ...]\n", len(b)-n) + strings.ToValidUTF8(string(b[len(b)-n:]), "\uFFFD")
}

// snippet is a short tail of the output for error messages.
func snippet(out string) string {
	const n = 500
	// A trailing newline would end the error message with a line break.
	out = strings.TrimRight(out, " \t\r\n")
	if out == "" {
		return "(none)"
	}
	if len(out) > n {
		return "…" + out[len(out)-n:]
	}
	return out
}
