package access

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"evals.si/spec"
)

// Program kinds: what a spec would run on the worker itself, outside
// any sandbox, with the worker's rights (and its credentials nearby).
const (
	ProgramMCPCommand     = "stdio MCP server command" // harness.builtin.tools.mcp[].command
	ProgramHarnessCommand = "external harness command" // harness.external.command
	ProgramPythonHarness  = "Python harness class"     // harness.external.python
	ProgramParser         = "checker parser"           // environment.checker.parser
)

// Program is one thing a spec would run on a worker.
type Program struct {
	// Field is where the spec names it, e.g. harness.builtin.tools.mcp[0].command.
	Field string
	Kind  string
	// Argv is a command's argv; Ref a Python class's or a parser's name.
	Argv []string
	Ref  string
	// Env are the names of the variables the spec sets for it, sorted.
	Env []string
}

// ErrUntrusted: a spec names a worker program the server's config does
// not trust. An *UntrustedError wraps it and ErrDenied.
var ErrUntrusted = errors.New("untrusted worker program")

// UntrustedError lists every refused program of a spec.
type UntrustedError struct {
	Refused []string // one message per program or variable
}

func (e *UntrustedError) Error() string {
	return "the spec runs programs on the worker that the server does not trust:\n  " + strings.Join(e.Refused, "\n  ")
}

func (e *UntrustedError) Unwrap() []error { return []error{ErrUntrusted, ErrDenied} }

var (
	// pythonRef is module:Name with a dotted module; pathRef the harness
	// shim's path/to/file.py:Class form.
	pythonRef = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$`)
	pathRef   = regexp.MustCompile(`^[^:]+\.py:[A-Za-z_][A-Za-z0-9_]*$`)
	// productRef is a reference into the product's own evalsi_* Python
	// packages (benchmark harnesses, registered parsers): a dotted module
	// name, never a file path, whose top-level package starts evalsi_.
	productRef = regexp.MustCompile(`^evalsi_[A-Za-z0-9_]+(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$`)
)

// productReference reports whether ref names code of the product's own
// evalsi_* packages. A module ending in .py is not one: the harness shim
// loads it as a file (evalsi_h.py:C is a file in the spec's directory).
func productReference(ref string) bool {
	module, _, _ := strings.Cut(ref, ":")
	return productRef.MatchString(ref) && !strings.HasSuffix(module, ".py")
}

// builtinParser reports whether a parser name is one the checker
// implements itself: exit-code (also the default), json, junit:<path>.
func builtinParser(name string) bool {
	return name == "" || name == "exit-code" || name == "json" || strings.HasPrefix(name, "junit:")
}

// WorkerPrograms lists what s would run on the worker itself: stdio MCP
// server commands, an external harness command or Python class, and
// checker parsers (the spec's environment's and those of its inline
// records' metadata.environment). Everything else a spec runs (setup, the
// checker's command, a CLI agent, a service) runs in the sandbox.
func WorkerPrograms(s *spec.Spec) []Program {
	var out []Program
	if h := s.Harness; h != nil {
		if b := h.Builtin; b != nil && b.Tools != nil {
			for i, m := range b.Tools.MCP {
				if len(m.Command) == 0 {
					continue // streamable HTTP: nothing runs on the worker
				}
				out = append(out, Program{
					Field: fmt.Sprintf("harness.builtin.tools.mcp[%d].command", i),
					Kind:  ProgramMCPCommand, Argv: slices.Clone(m.Command),
					Env: slices.Sorted(maps.Keys(m.Env)),
				})
			}
		}
		if x := h.External; x != nil {
			if len(x.Command) > 0 {
				out = append(out, Program{Field: "harness.external.command", Kind: ProgramHarnessCommand, Argv: slices.Clone(x.Command)})
			}
			if x.Python != "" {
				out = append(out, Program{Field: "harness.external.python", Kind: ProgramPythonHarness, Ref: x.Python})
			}
		}
	}
	if e := s.Environment; e != nil && e.Checker != nil {
		out = append(out, Program{Field: "environment.checker.parser", Kind: ProgramParser, Ref: e.Checker.Parser})
	}
	for i, rec := range s.Dataset.Records {
		out = append(out, recordPrograms(fmt.Sprintf("dataset.records[%d] (%q) metadata.environment", i, rec.ID), rec)...)
	}
	return out
}

// RecordPrograms lists what a record's metadata.environment would run on
// the worker (its checker parser). WorkerPrograms covers inline records;
// a worker calls this for records it loaded from a file or URI.
func RecordPrograms(rec spec.Record) []Program {
	return recordPrograms(fmt.Sprintf("record %q metadata.environment", rec.ID), rec)
}

func recordPrograms(field string, rec spec.Record) []Program {
	raw, ok := rec.Metadata["environment"]
	if !ok {
		return nil
	}
	var over struct {
		Checker *struct {
			Parser json.RawMessage `json:"parser"`
		} `json:"checker"`
	}
	if err := json.Unmarshal(raw, &over); err != nil {
		// Not an object the dataset package could merge either; report
		// it as a program no config can trust rather than skip it.
		return []Program{{Field: field, Kind: ProgramParser, Ref: "<unreadable metadata.environment>"}}
	}
	if over.Checker == nil || len(over.Checker.Parser) == 0 || string(over.Checker.Parser) == "null" {
		return nil
	}
	var parser string
	if err := json.Unmarshal(over.Checker.Parser, &parser); err != nil {
		parser = "<not a string: " + string(over.Checker.Parser) + ">"
	}
	return []Program{{Field: field + ".checker.parser", Kind: ProgramParser, Ref: parser}}
}

// CheckPrograms refuses the programs the config does not trust, naming
// each one's field and the config key that would trust it. Always allowed:
// the checker's built-in parsers (exit-code, json, junit:<path>) and
// references into the product's evalsi_* packages. A command is trusted
// when agents.trusted_commands has it exactly (see Agents), a Python
// class or module:function parser when agents.trusted_python has it; a
// variable a spec sets for a program must be in agents.trusted_env.
func (a *Access) CheckPrograms(progs []Program) error {
	var refused []string
	for _, p := range progs {
		switch p.Kind {
		case ProgramMCPCommand, ProgramHarnessCommand:
			if !a.trustedCommand(p.Argv) {
				refused = append(refused, fmt.Sprintf("%s: the %s %s is not trusted: add it to agents.trusted_commands in the server config (argv[0] as written; end the entry with %q to allow further arguments)", p.Field, p.Kind, quoteArgv(p.Argv), AnyArgs))
			}
		case ProgramPythonHarness:
			if !productReference(p.Ref) && !a.python[p.Ref] {
				refused = append(refused, fmt.Sprintf("%s: the %s %q is not trusted: add it to agents.trusted_python in the server config", p.Field, p.Kind, p.Ref))
			}
		case ProgramParser:
			if !builtinParser(p.Ref) && !productReference(p.Ref) && !a.python[p.Ref] {
				refused = append(refused, fmt.Sprintf("%s: the %s %q is not trusted: use exit-code, json or junit:<path>, or add it to agents.trusted_python in the server config", p.Field, p.Kind, p.Ref))
			}
		default:
			refused = append(refused, fmt.Sprintf("%s: unknown kind of worker program %q", p.Field, p.Kind))
		}
		for _, n := range p.Env {
			if !a.env[n] {
				refused = append(refused, fmt.Sprintf("%s: sets %s for a program on the worker, which could make it run other code: add %s to agents.trusted_env in the server config if it is safe", strings.TrimSuffix(p.Field, ".command")+".env", n, n))
			}
		}
	}
	if len(refused) > 0 {
		return &UntrustedError{Refused: refused}
	}
	return nil
}

// trustedCommand reports whether argv matches a trusted_commands entry:
// equal element by element, with further arguments only after an entry
// ending in AnyArgs. Nothing is resolved: "npx" and "/usr/bin/npx" are
// different commands, as are "./h" in two spec directories (so trust
// absolute paths or names the worker's own PATH resolves).
func (a *Access) trustedCommand(argv []string) bool {
	if len(argv) == 0 {
		return false
	}
	for _, e := range a.cmds {
		prefix, open := e, false
		if e[len(e)-1] == AnyArgs {
			prefix, open = e[:len(e)-1], true
		}
		if len(argv) < len(prefix) || !open && len(argv) != len(prefix) {
			continue
		}
		if slices.Equal(argv[:len(prefix)], prefix) {
			return true
		}
	}
	return false
}

func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, s := range argv {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
