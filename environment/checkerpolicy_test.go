package environment

import (
	"slices"
	"testing"

	"evals.si/sandbox"
	"evals.si/spec"
)

// The checker's network is checker.network when set, else the trial's.
func TestCheckerPolicy(t *testing.T) {
	sb := &spec.SandboxPolicy{Network: "allowlist", AllowHosts: []string{"a.example:443"}}
	for _, tc := range []struct {
		name  string
		env   *spec.Environment
		want  string
		hosts []string
	}{
		{"no checker", &spec.Environment{Sandbox: sb}, sandbox.NetworkAllowlist, sb.AllowHosts},
		{"checker without a network", &spec.Environment{Sandbox: sb, Checker: &spec.Checker{Command: []string{"t"}}}, sandbox.NetworkAllowlist, sb.AllowHosts},
		{"checker deny", &spec.Environment{Sandbox: sb, Checker: &spec.Checker{Network: "deny"}}, sandbox.NetworkDeny, nil},
		{"checker allowlist", &spec.Environment{Checker: &spec.Checker{Network: "allowlist", AllowHosts: []string{"b.example:443"}}}, sandbox.NetworkAllowlist, []string{"b.example:443"}},
		{"nothing set", &spec.Environment{}, sandbox.NetworkDeny, nil},
	} {
		got := CheckerPolicy(tc.env)
		if got.Network != tc.want || !slices.Equal(got.AllowHosts, tc.hosts) {
			t.Errorf("%s: %+v, want %s %v", tc.name, got, tc.want, tc.hosts)
		}
	}
}
