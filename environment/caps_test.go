package environment

import (
	"context"
	"strings"
	"testing"

	"evals.si/spec"
)

// Setup commands keep what the run's output cap allows. A failing step's
// error ends with the end of what was kept, so what the cap dropped is not
// in it. (The last line is computed, because the error quotes the command.)
func TestSetupOutputLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int
		ended bool // the error shows the output's last line
	}{
		{"the default keeps 100 kB", 0, true},
		{"64 KiB cuts it", 64 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newManager(t)
			defer m.Close()
			env := &spec.Environment{
				Setup:   spec.Steps(`head -c 100000 /dev/zero | tr '\0' x; echo; echo "end of output: $((6*7))"; exit 1`),
				Sandbox: &spec.SandboxPolicy{Ladder: []string{"bwrap"}, Workdir: "/work"},
			}
			_, err := m.Prepare(context.Background(), env, SetupOptions{OutputLimit: tc.limit})
			if err == nil || !strings.Contains(err.Error(), "exited 1") {
				t.Fatalf("err %v, want the setup step's failure", err)
			}
			if got := strings.Contains(err.Error(), "end of output: 42"); got != tc.ended {
				t.Errorf("the error shows the output's last line: %v, want %v:\n%.300s", got, tc.ended, err)
			}
		})
	}
}
