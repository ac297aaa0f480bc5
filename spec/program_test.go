package spec

import "testing"

func TestCLIAgentProgram(t *testing.T) {
	for _, tc := range []struct{ command, want string }{
		{"claude -p {instruction}", "claude"},
		{"/usr/local/bin/codex exec --json", "codex"},
		{"OPENAI_API_KEY=sk-secret codex exec", "codex"},
		{"A=1 B_2=x env -i PATH=/bin ./agent.sh", "agent.sh"},
		{"env FOO=bar node dist/cli.js", "node"},
		{"  ", ""},
		{"A=1", ""},
		{"=x run", "=x"},
	} {
		if got := (&CLIAgent{Command: tc.command}).Program(); got != tc.want {
			t.Errorf("Program(%q) = %q, want %q", tc.command, got, tc.want)
		}
	}
}
