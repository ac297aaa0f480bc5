package dataset

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"evals.si/spec"
)

func TestEnvironment(t *testing.T) {
	f := loadSpec(t, "testdata/spec.yaml")
	base := f.Spec.Environment
	before, _ := json.Marshal(base)

	for _, tc := range []struct {
		name     string
		metadata string // metadata.environment, JSON; "" for none
		check    func(t *testing.T, e *spec.Environment)
	}{
		{"no override: an equal copy", "", func(t *testing.T, e *spec.Environment) {
			if !reflect.DeepEqual(e, base) {
				t.Errorf("copy differs: %+v", e)
			}
		}},
		{"one nested scalar", `{"sandbox": {"memory_mb": 1024}}`, func(t *testing.T, e *spec.Environment) {
			if e.Sandbox.MemoryMB != 1024 || e.Sandbox.Workdir != "/testbed" || e.Sandbox.MinIsolation != "namespaced" {
				t.Errorf("sandbox = %+v", e.Sandbox)
			}
			if e.Image != base.Image || !reflect.DeepEqual(e.Checker, base.Checker) {
				t.Errorf("untouched fields changed: %+v", e)
			}
		}},
		{"maps merge key by key", `{"files": {"test.py": "t"}, "env": {"A": "2", "B": "3"}}`, func(t *testing.T, e *spec.Environment) {
			if len(e.Files) != 2 || e.Files["calc.py"] == "" || e.Files["test.py"] != "t" {
				t.Errorf("files = %v", e.Files)
			}
			if !reflect.DeepEqual(e.Env, map[string]string{"A": "2", "B": "3"}) {
				t.Errorf("env = %v", e.Env)
			}
		}},
		{"lists and scalars replace", `{"setup": ["pip install -e ."], "image": "python:3.12", "sandbox": {"ladder": ["bwrap"]}}`, func(t *testing.T, e *spec.Environment) {
			if !reflect.DeepEqual(e.Setup, spec.Steps("pip install -e .")) || e.Image != "python:3.12" || !reflect.DeepEqual(e.Sandbox.Ladder, []string{"bwrap"}) {
				t.Errorf("env = %+v sandbox %+v", e, e.Sandbox)
			}
		}},
		{"null clears", `{"image": null, "checker": null}`, func(t *testing.T, e *spec.Environment) {
			if e.Image != "" || e.Checker != nil {
				t.Errorf("image %q checker %+v", e.Image, e.Checker)
			}
		}},
		{"new sections get defaults", `{"checker": {"command": ["sh", "run-tests.sh"], "parser": "json"}, "command_timeout": "1m"}`, func(t *testing.T, e *spec.Environment) {
			if e.Checker.Parser != "json" || e.Checker.Timeout.D() != spec.DefaultCheckerTimeout || e.CommandTimeout.D() != time.Minute {
				t.Errorf("checker %+v timeout %v", e.Checker, e.CommandTimeout)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := spec.Record{ID: "r1"}
			if tc.metadata != "" {
				rec.Metadata = map[string]spec.JSON{"environment": spec.JSON(tc.metadata)}
			}
			e, err := Environment(base, rec)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, e)
			// The result shares nothing with base: changing it leaves base alone.
			e.Files["mutated"] = "x"
			e.Sandbox.Ladder = append(e.Sandbox.Ladder[:0], "host")
			e.Sandbox.MemoryMB = 1
			if after, _ := json.Marshal(base); string(after) != string(before) {
				t.Fatalf("base changed:\n%s\n%s", before, after)
			}
		})
	}
}

func TestEnvironmentFromJSONL(t *testing.T) {
	f := loadSpec(t, "testdata/spec.yaml")
	recs, err := ReadFile("testdata/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// The spec lets records use the network; record 2 narrows it.
	base := f.Spec.Environment
	base.SetupNetwork, base.Sandbox.Network = "allow", "allow"
	e, err := Environment(base, recs[2])
	if err != nil {
		t.Fatal(err)
	}
	if e.SetupNetwork != "allow" || e.Sandbox.Network != "allowlist" || e.Sandbox.AllowHosts[0] != "pypi.org:443" || e.Setup[0].Run != "pip install requests" || e.Sandbox.MemoryMB != 2048 {
		t.Errorf("env = %+v sandbox %+v", e, e.Sandbox)
	}
}

func TestEnvironmentNilBase(t *testing.T) {
	e, err := Environment(nil, spec.Record{ID: "a"})
	if err != nil || e != nil {
		t.Fatalf("nil base, no override = %v, %v", e, err)
	}
	e, err = Environment(nil, spec.Record{ID: "a", Metadata: map[string]spec.JSON{"environment": spec.JSON(`{"image": "alpine:3"}`)}})
	if err != nil || e.Image != "alpine:3" || e.Sandbox.Workdir != spec.DefaultWorkdir {
		t.Fatalf("nil base with override = %+v, %v", e, err)
	}
}

func TestEnvironmentErrors(t *testing.T) {
	base := loadSpec(t, "testdata/spec.yaml").Spec.Environment
	base.Sandbox.Network = "allow"
	for _, tc := range []struct{ name, metadata, want string }{
		{"not an object", `["a"]`, `record "bad" metadata.environment:1:1: the value must be a mapping, not a list`},
		{"misspelt field", `{"sandbox": {"memroy_mb": 1}}`, `record "bad" metadata.environment:1:14: unknown field "memroy_mb" in sandbox; did you mean "memory_mb"?`},
		{"wrong type", `{"setup": "pip install x"}`, `record "bad" metadata.environment:1:11: setup must be a list, not the string "pip install x"`},
		{"bad duration", `{"command_timeout": "2 minutes"}`, `record "bad" metadata.environment:1:21: bad duration "2 minutes" for command_timeout; use a number with a unit: "90s", "10m", "1h30m"`},
		{"invalid after merge", `{"sandbox": {"network": "allowlist"}}`, `record "bad" metadata.environment: environment.sandbox.network: network allowlist needs allow_hosts; list the hosts in allow_hosts as host:port`},
		{"bad enum", `{"sandbox": {"network": "maybe"}}`, `record "bad" metadata.environment: environment.sandbox.network: bad network "maybe"; use one of deny, allowlist, allow`},
		{"looser", `{"sandbox": {"memory_mb": 4096}}`, `record "bad" metadata.environment asks for a weaker sandbox than the spec allows (sandbox.memory_mb: 4096 is looser than the spec's 2048); a record may only tighten the spec's environment: loosen it in the spec file if you mean it, or remove the field from the record`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := spec.Record{ID: "bad", Metadata: map[string]spec.JSON{"environment": spec.JSON(tc.metadata)}}
			_, err := Environment(base, rec)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v\nwant  %s", err, tc.want)
			}
			if !strings.Contains(err.Error(), `record "bad"`) {
				t.Errorf("error does not name the record")
			}
		})
	}
}
