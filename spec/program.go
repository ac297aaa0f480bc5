package spec

import (
	"path"
	"strings"
)

// Program is the name of the program a CLI agent's command runs, for
// labels (the runs list, span names): the base name of its first word
// after any leading NAME=value assignments and an `env` prefix. Those
// assignments are left out on purpose: a command such as
// `OPENAI_API_KEY=sk-… codex exec` must not put the key in a label.
// Empty when the command names no program.
func (c *CLIAgent) Program() string {
	afterEnv := false
	for _, w := range strings.Fields(c.Command) {
		switch {
		case w == "env" && !afterEnv:
			afterEnv = true
		case afterEnv && isEnvOption(w), isAssignment(w):
		default:
			return path.Base(w)
		}
	}
	return ""
}

// isAssignment reports whether w is a shell variable assignment NAME=value.
func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// isEnvOption is an option of env(1) that takes no argument (-i, -0,
// --ignore-environment), skipped after `env`.
func isEnvOption(w string) bool {
	switch w {
	case "-i", "-0", "--ignore-environment", "--null", "-":
		return true
	}
	return false
}
