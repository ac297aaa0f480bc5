package dataset

import (
	"errors"
	"strings"
	"testing"

	"evals.si/spec"
)

// A record may tighten every field of the spec's sandbox policy and loosen
// none: each looser field is refused, named, whatever the rest says.
func TestRecordCannotLoosenTheSpec(t *testing.T) {
	strict := func() *spec.Environment {
		e := &spec.Environment{
			Image: "img:1",
			Sandbox: &spec.SandboxPolicy{
				Network: "allowlist", AllowHosts: []string{"pypi.org:443", "files.pythonhosted.org:443"},
				MinIsolation: "namespaced", MemoryMB: 1024, PidsMax: 256, FileSizeMB: 64, DiskMB: 2048, CgroupCPUs: 2,
				ReadOnlyRoot: true, Ladder: []string{"bwrap", "landlock"},
				ImageSignatures: &spec.ImageSignatures{Keys: []string{"k1", "k2"}},
			},
			CommandTimeout: spec.Duration(60e9),
		}
		e.ApplyDefaults()
		return e
	}
	defaults := func() *spec.Environment { e := &spec.Environment{}; e.ApplyDefaults(); return e }
	allowSpec := func() *spec.Environment {
		e := &spec.Environment{Sandbox: &spec.SandboxPolicy{Network: "allow"}}
		e.ApplyDefaults()
		return e
	}
	for _, tc := range []struct {
		name     string
		base     *spec.Environment
		metadata string
		field    string // "" when the record only tightens
	}{
		{"tightens everything", strict(), `{"image": "other:2", "files": {"a": "b"}, "setup": ["x"], "checker": {"command": ["true"]},
			"sandbox": {"network": "deny", "allow_hosts": null, "min_isolation": "vm", "memory_mb": 512, "pids_max": 10, "file_size_mb": 1,
			"disk_mb": 10, "cgroup_cpus": 1, "ladder": ["landlock"], "image_signatures": {"keys": ["k2", "k1"]}, "workdir": "/w"},
			"command_timeout": "30s"}`, ""},
		{"a subset of allow_hosts", strict(), `{"sandbox": {"allow_hosts": ["PyPI.org.:443"]}}`, ""},
		{"network allow", strict(), `{"sandbox": {"network": "allow", "allow_hosts": null}}`, "sandbox.network"},
		{"network allowlist over deny", defaults(), `{"sandbox": {"network": "allowlist", "allow_hosts": ["a.b:443"]}}`, "sandbox.network"},
		{"loopback over allow", allowSpec(), `{"sandbox": {"network": "allowlist", "allow_hosts": ["127.0.0.1:5432"]}}`, "sandbox.allow_hosts"},
		{"localhost over allow", allowSpec(), `{"sandbox": {"network": "allowlist", "allow_hosts": ["localhost:8089"]}}`, "sandbox.allow_hosts"},
		{"a public host over allow", allowSpec(), `{"sandbox": {"network": "allowlist", "allow_hosts": ["pypi.org:443"]}}`, ""},
		{"another host", strict(), `{"sandbox": {"allow_hosts": ["pypi.org:443", "evil.example:443"]}}`, "sandbox.allow_hosts"},
		{"setup_network", defaults(), `{"setup_network": "allow"}`, "setup_network"},
		{"more memory", strict(), `{"sandbox": {"memory_mb": 2048}}`, "sandbox.memory_mb"},
		{"no memory limit", strict(), `{"sandbox": {"memory_mb": 0}}`, "sandbox.memory_mb"},
		{"more pids", strict(), `{"sandbox": {"pids_max": 1000}}`, "sandbox.pids_max"},
		{"bigger files", strict(), `{"sandbox": {"file_size_mb": 65}}`, "sandbox.file_size_mb"},
		{"more disk", strict(), `{"sandbox": {"disk_mb": null}}`, "sandbox.disk_mb"},
		{"more cpus", strict(), `{"sandbox": {"cgroup_cpus": 4}}`, "sandbox.cgroup_cpus"},
		{"longer commands", strict(), `{"command_timeout": "10m"}`, "command_timeout"},
		{"longer than the default", defaults(), `{"command_timeout": "1h"}`, "command_timeout"},
		{"writable root", strict(), `{"sandbox": {"read_only_root": false}}`, "sandbox.read_only_root"},
		{"lower isolation", strict(), `{"sandbox": {"min_isolation": "process"}}`, "sandbox.min_isolation"},
		{"no isolation minimum", strict(), `{"sandbox": {"min_isolation": null}}`, "sandbox.min_isolation"},
		{"another rung", strict(), `{"sandbox": {"ladder": ["bwrap", "docker"]}}`, "sandbox.ladder"},
		{"weaker first", strict(), `{"sandbox": {"ladder": ["landlock", "bwrap"]}}`, "sandbox.ladder"},
		{"the host rung", defaults(), `{"sandbox": {"ladder": ["host"], "allow_unsafe_host": true}}`, "sandbox.ladder"},
		{"the host rung after bwrap", defaults(), `{"sandbox": {"ladder": ["bwrap", "host"], "allow_unsafe_host": true}}`, "sandbox.ladder"},
		{"allow_unsafe_host", defaults(), `{"sandbox": {"allow_unsafe_host": true}}`, "sandbox.allow_unsafe_host"},
		{"signatures removed", strict(), `{"sandbox": {"image_signatures": null}}`, "sandbox.image_signatures"},
		{"other keys", strict(), `{"sandbox": {"image_signatures": {"keys": ["mine"]}}}`, "sandbox.image_signatures.keys"},
		{"unsigned local images", strict(), `{"sandbox": {"image_signatures": {"allow_local": true}}}`, "sandbox.image_signatures.allow_local"},
		{"cgroup off", strict(), `{"sandbox": {"cgroup": "off"}}`, "sandbox.cgroup"},
		{"firecracker jailer", defaults(), `{"sandbox": {"firecracker": {"jailer": "/tmp/j"}}}`, "sandbox.firecracker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := spec.Record{ID: "rec-7", Metadata: map[string]spec.JSON{"environment": spec.JSON(tc.metadata)}}
			_, err := Environment(tc.base, rec)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("a tightening record was refused: %v", err)
				}
				return
			}
			var le *LooserError
			if !errors.As(err, &le) {
				t.Fatalf("err = %v, want a LooserError", err)
			}
			if le.Record != "rec-7" || le.Fields[0].Field != tc.field {
				t.Errorf("refused %q for %+v, want %s first", le.Record, le.Fields, tc.field)
			}
			if !strings.Contains(err.Error(), `record "rec-7"`) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error does not name the record and field: %v", err)
			}
		})
	}
}

// What a benchmark importer translates from a task (its network, setup
// network, memory) is capped to the spec's, so the importer's records run
// under the spec author's policy; anything else still loosening is left to
// be refused.
func TestCapNetworkAndLimits(t *testing.T) {
	base := &spec.Environment{Sandbox: &spec.SandboxPolicy{MemoryMB: 2048, Network: "allowlist", AllowHosts: []string{"pypi.org:443"}}}
	base.ApplyDefaults()
	for _, tc := range []struct {
		name, metadata string
		check          func(*spec.Environment) bool
		refused        string
	}{
		{"harbor-like", `{"image": "task:1", "setup_network": "allow", "sandbox": {"network": "allow", "memory_mb": 4096, "workdir": "/app"}}`,
			func(e *spec.Environment) bool {
				return e.Image == "task:1" && e.SetupNetwork == "deny" && e.Sandbox.Network == "allowlist" &&
					e.Sandbox.AllowHosts[0] == "pypi.org:443" && e.Sandbox.MemoryMB == 2048 && e.Sandbox.Workdir == "/app"
			}, ""},
		{"hosts beyond the spec's", `{"sandbox": {"allow_hosts": ["pypi.org:443", "evil.example:443"]}}`,
			func(e *spec.Environment) bool {
				return len(e.Sandbox.AllowHosts) == 1 && e.Sandbox.AllowHosts[0] == "pypi.org:443"
			}, ""},
		{"no host the spec allows", `{"sandbox": {"allow_hosts": ["evil.example:443"]}}`,
			func(e *spec.Environment) bool { return e.Sandbox.Network == "deny" && len(e.Sandbox.AllowHosts) == 0 }, ""},
		{"tighter stays", `{"sandbox": {"network": "deny", "allow_hosts": null, "memory_mb": 512}}`,
			func(e *spec.Environment) bool { return e.Sandbox.Network == "deny" && e.Sandbox.MemoryMB == 512 }, ""},
		{"the host rung is not capped but refused", `{"sandbox": {"network": "allow", "ladder": ["host"], "allow_unsafe_host": true}}`, nil, "sandbox.ladder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := spec.Record{ID: "task-1", Metadata: map[string]spec.JSON{"environment": spec.JSON(tc.metadata)}}
			capped, _, err := CapNetworkAndLimits(base, rec)
			if err != nil {
				t.Fatal(err)
			}
			if string(rec.Metadata["environment"]) != tc.metadata {
				t.Fatalf("the record was modified")
			}
			env, err := Environment(base, capped)
			if tc.refused != "" {
				var le *LooserError
				if !errors.As(err, &le) || le.Fields[0].Field != tc.refused {
					t.Fatalf("err = %v, want %s refused", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(env) {
				t.Errorf("capped environment %+v sandbox %+v", env, env.Sandbox)
			}
		})
	}
}
