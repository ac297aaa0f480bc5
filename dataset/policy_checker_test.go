package dataset

import (
	"errors"
	"testing"

	"evals.si/spec"
)

// The checker's phase has a network of its own, and a record may tighten
// it but not loosen it, by the same rules as sandbox.network: its ceiling
// is the spec's checker.network, else the spec's sandbox.network. A
// record's checker that names no network inherits the record's sandbox's.
func TestRecordCannotLoosenTheCheckersNetwork(t *testing.T) {
	env := func(sandboxNet, checkerNet string, hosts ...string) *spec.Environment {
		e := &spec.Environment{Sandbox: &spec.SandboxPolicy{Network: sandboxNet}}
		if checkerNet != "" {
			e.Checker = &spec.Checker{Command: []string{"true"}, Network: checkerNet, AllowHosts: hosts}
		}
		e.ApplyDefaults()
		return e
	}
	for _, tc := range []struct {
		name     string
		base     *spec.Environment
		metadata string
		field    string
	}{
		{"allow where the spec says deny", env("deny", ""), `{"checker": {"command": ["t"], "network": "allow"}}`, "checker.network"},
		{"allowlist where the spec says deny", env("deny", ""), `{"checker": {"command": ["t"], "network": "allowlist", "allow_hosts": ["a.b:443"]}}`, "checker.network"},
		{"the spec's checker is tighter than its sandbox", env("allow", "deny"), `{"checker": {"network": "allow"}}`, "checker.network"},
		{"clearing the spec's tighter checker network", env("allow", "deny"), `{"checker": {"network": null}}`, "checker.network"},
		{"hosts beyond the spec checker's", env("deny", "allowlist", "pypi.org:443"), `{"checker": {"allow_hosts": ["pypi.org:443", "evil.example:443"]}}`, "checker.allow_hosts"},
		{"the machine's own address over allow", env("allow", ""), `{"checker": {"command": ["t"], "network": "allowlist", "allow_hosts": ["127.0.0.1:80"]}}`, "checker.allow_hosts"},
		{"allow where the spec's checker allows", env("deny", "allow"), `{"checker": {"network": "allow"}}`, ""},
		{"deny where the spec allows", env("allow", ""), `{"checker": {"command": ["t"], "network": "deny"}}`, ""},
		{"a subset of the spec checker's hosts", env("deny", "allowlist", "pypi.org:443", "x.y:443"), `{"checker": {"allow_hosts": ["x.y:443"]}}`, ""},
		{"the record's checker inherits its tighter sandbox", env("allow", ""), `{"sandbox": {"network": "deny"}, "checker": {"command": ["t"]}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := spec.Record{ID: "r", Metadata: map[string]spec.JSON{"environment": spec.JSON(tc.metadata)}}
			_, err := Environment(tc.base, rec)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var le *LooserError
			if !errors.As(err, &le) || le.Fields[0].Field != tc.field {
				t.Fatalf("err = %v, want %s refused", err, tc.field)
			}
		})
	}
}

// An importer's checker network (Harbor's [verifier] network_mode) is a
// request: capped to the spec's, hosts the spec allows kept.
func TestCapCheckerNetwork(t *testing.T) {
	base := &spec.Environment{Sandbox: &spec.SandboxPolicy{Network: "allowlist", AllowHosts: []string{"pypi.org:443"}}}
	base.ApplyDefaults()
	for _, tc := range []struct {
		name, metadata string
		network        string
		hosts          int
	}{
		{"allow capped to the spec's allowlist", `{"checker": {"command": ["t"], "network": "allow"}}`, "allowlist", 1},
		{"hosts beyond the spec's dropped", `{"checker": {"command": ["t"], "network": "allowlist", "allow_hosts": ["pypi.org:443", "evil.example:443"]}}`, "allowlist", 1},
		{"no host the spec allows: deny", `{"checker": {"command": ["t"], "network": "allowlist", "allow_hosts": ["evil.example:443"]}}`, "deny", 0},
		{"tighter stays", `{"checker": {"command": ["t"], "network": "deny"}}`, "deny", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := spec.Record{ID: "task", Metadata: map[string]spec.JSON{"environment": spec.JSON(tc.metadata)}}
			capped, _, err := CapNetworkAndLimits(base, rec)
			if err != nil {
				t.Fatal(err)
			}
			env, err := Environment(base, capped)
			if err != nil {
				t.Fatal(err)
			}
			got := checkerNetwork(env.Checker, env.Sandbox)
			if got.mode != tc.network || len(got.hosts) != tc.hosts {
				t.Errorf("checker network %+v, want %s with %d hosts", got, tc.network, tc.hosts)
			}
		})
	}
}
