package access

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestCheckGrants proves a run may name only the secrets its project is
// granted, and a refusal lists the ungranted names, never a value.
func TestCheckGrants(t *testing.T) {
	a := newAccess(t, testConfig())
	const head = "dataset: {records: [{id: r1, input: x}]}\n"
	tests := []struct {
		name    string
		project string
		yaml    string
		want    []string // nil: granted
	}{
		{"the default key, granted", "alpha", head + "target: {connector: anthropic, model: m}\n", nil},
		{"granted env_from", "alpha", head + "target: {agent: {cli: {command: x, env_from: {ANTHROPIC_API_KEY: ANTHROPIC_API_KEY, GITHUB_TOKEN: GH_TOKEN}}}}\n", nil},
		{"an ungranted api_key_env", "alpha", head + "target: {connector: openai, model: m, api_key_env: PROD_OPENAI_KEY}\n", []string{"PROD_OPENAI_KEY"}},
		{"the default key of another connector", "alpha", head + "target: {connector: openai, model: m}\n", []string{"OPENAI_API_KEY"}},
		{"ungranted headers_env and a judge", "alpha", head + "target: {agent: {a2a: {url: 'http://127.0.0.1:1', headers_env: {Authorization: A2A_TOKEN}}}}\njudge: {connector: openai, model: j, api_key_env: JUDGE_KEY}\n",
			[]string{"A2A_TOKEN", "JUDGE_KEY"}},
		{"a project with no grants", "beta", head + "target: {connector: anthropic, model: m}\n", []string{"ANTHROPIC_API_KEY"}},
		{"an unknown project", "gamma", head + "target: {connector: anthropic, model: m}\n", []string{"ANTHROPIC_API_KEY"}},
		{"the scripted connector names none", "beta", head + "target: {connector: scripted, model: m, script: {default: [{content: hi}]}}\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := a.CheckGrants(tt.project, parseSpec(t, tt.yaml))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ue *UngrantedError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUngranted) || !errors.Is(err, ErrDenied) {
				t.Fatalf("got %v; want an *UngrantedError wrapping ErrUngranted and ErrDenied", err)
			}
			if !slices.Equal(ue.Names, tt.want) {
				t.Errorf("ungranted %v, want %v", ue.Names, tt.want)
			}
			if !strings.Contains(err.Error(), "credentials.grants."+tt.project) || !strings.Contains(err.Error(), strings.Join(tt.want, ", ")) {
				t.Errorf("refusal %q names neither the names nor the config key", err)
			}
		})
	}
}
