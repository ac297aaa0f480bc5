package access

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"

	"evals.si/spec"
)

// Resource kinds.
const (
	ResourceRun     = "run"
	ResourceTrial   = "trial"
	ResourceDataset = "dataset"
	ResourceProject = "project"
)

// RunResource describes a run of spec s in project for Authorize. For an
// agent run (s.IsAgentRun, or any spec with an environment, which runs
// commands in a sandbox), runs_code is true and agent says what runs and
// where; the values are the effective ones, defaults applied, so a rule
// sees what the run will get rather than what the file happens to spell.
func RunResource(project string, s *spec.Spec) Resource {
	r := Resource{Kind: ResourceRun, Project: project, Name: s.Name}
	r.Endpoints, r.Paths = workerReach(s)
	if !s.IsAgentRun() && s.Environment == nil {
		return r
	}
	r.RunsCode = true
	env := s.Environment // only read
	if env == nil {
		env = &spec.Environment{}
	}
	r.Agent = &AgentInfo{Kind: agentKind(s), Harness: harnessName(s.Harness), Image: env.Image, Images: []string{env.Image}}
	for _, rec := range s.Dataset.Records {
		if img, ok := recordImage(rec); ok && !slices.Contains(r.Agent.Images, img) {
			r.Agent.Images = append(r.Agent.Images, img)
		}
	}

	// The widest network of everything in the sandbox, and every host an
	// allowlist names.
	sb := spec.SandboxPolicy{}
	if env.Sandbox != nil {
		sb = *env.Sandbox
	}
	net := orDefault(sb.Network, spec.DefaultNetwork)
	hosts := slices.Clone(sb.AllowHosts)
	if a := s.Target.Agent; a != nil && a.CLI != nil && len(a.CLI.AllowHosts) > 0 {
		// A CLI agent's allow_hosts turn deny into an allowlist (see
		// agent/cli's ShapeEnvironment).
		net = widest(net, "allowlist")
		hosts = append(hosts, a.CLI.AllowHosts...)
	}
	net = widest(net, orDefault(env.SetupNetwork, spec.DefaultSetupNetwork))
	if c := env.Checker; c != nil {
		net = widest(net, c.Network)
		hosts = append(hosts, c.AllowHosts...)
	}
	slices.Sort(hosts)
	r.Agent.Network = net
	r.Agent.AllowHosts = slices.Compact(hosts)
	r.Agent.MinIsolation = minIsolation(sb)
	return r
}

// WithRecords adds the images records' metadata.environment override to
// r's agent.images: RunResource sees the spec's inline records only; the
// server calls this with the records of a dataset file or URI once it has
// loaded them, so a rule on images covers every task.
func WithRecords(r Resource, recs []spec.Record) Resource {
	if r.Agent == nil {
		return r
	}
	a := *r.Agent
	a.Images = slices.Clone(a.Images)
	for _, rec := range recs {
		if img, ok := recordImage(rec); ok && !slices.Contains(a.Images, img) {
			a.Images = append(a.Images, img)
		}
	}
	r.Agent = &a
	return r
}

// recordImage is the image a record's metadata.environment sets, if any.
func recordImage(rec spec.Record) (string, bool) {
	var over struct {
		Image *string `json:"image"`
	}
	raw, ok := rec.Metadata["environment"]
	if !ok || json.Unmarshal(raw, &over) != nil {
		return "", false
	}
	if over.Image == nil {
		// Absent keeps the spec's image; JSON null clears it, which
		// the decoder cannot tell from absent: look at the raw key.
		var keys map[string]json.RawMessage
		if json.Unmarshal(raw, &keys) == nil {
			if v, ok := keys["image"]; ok && string(v) == "null" {
				return "", true
			}
		}
		return "", false
	}
	return *over.Image, true
}

// agentKind names what drives the run.
func agentKind(s *spec.Spec) string {
	if h := s.Harness; h != nil && h.External != nil {
		return "external"
	}
	if a := s.Target.Agent; a != nil {
		switch {
		case a.A2A != nil:
			return "a2a"
		case a.MCP != nil:
			return "mcp"
		case a.Responses != nil:
			return "responses"
		case a.HTTP != nil:
			return "http"
		case a.CLI != nil:
			return "cli"
		case a.Oracle != nil:
			return "oracle"
		}
		return "unknown"
	}
	return "builtin"
}

func harnessName(h *spec.Harness) string {
	if h == nil || h.External == nil {
		return "builtin"
	}
	x := h.External
	switch {
	case len(x.Command) > 0:
		return "command:" + strings.Join(x.Command, " ")
	case x.Python != "":
		return "python:" + x.Python
	case x.Address != "":
		return "address:" + x.Address
	}
	return "external"
}

// networkRank orders networks narrowest first ("" is a phase keeping
// another's network).
var networkRank = map[string]int{"": 0, "deny": 1, "allowlist": 2, "allow": 3}

// widest is the wider of two networks; a value it does not know counts as
// allow, so a misspelt network is never mistaken for a narrow one.
func widest(a, b string) string {
	ra, oka := networkRank[a]
	rb, okb := networkRank[b]
	switch {
	case !oka || !okb:
		return "allow"
	case rb > ra:
		return b
	}
	return a
}

// workerReach lists what the worker itself would connect to and which of
// its files it would read or write for s, found the way spec.SecretNames
// finds secrets: by the spec's field names (url, base_url, address;
// path, dir, file, script_file, uri) anywhere outside environment, whose
// paths are inside the sandbox. Walking by convention keeps a new agent
// kind or connector from slipping past a rule on endpoints.
func workerReach(s *spec.Spec) (endpoints, paths []string) {
	envType, jsonType := reflect.TypeFor[spec.Environment](), reflect.TypeFor[spec.JSON]()
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Slice, reflect.Array:
			if v.Type() == jsonType {
				return
			}
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Map:
			for it := v.MapRange(); it.Next(); {
				walk(it.Value())
			}
		case reflect.Struct:
			if v.Type() == envType {
				return
			}
			t := v.Type()
			for i := range t.NumField() {
				f := t.Field(i)
				if !f.IsExported() {
					continue
				}
				fv := v.Field(i)
				tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if fv.Kind() == reflect.String && fv.String() != "" {
					switch tag {
					case "url", "base_url", "address":
						endpoints = append(endpoints, fv.String())
					case "path", "dir", "file", "script_file", "uri":
						paths = append(paths, fv.String())
					}
					continue
				}
				walk(fv)
			}
		}
	}
	walk(reflect.ValueOf(s))
	slices.Sort(endpoints)
	slices.Sort(paths)
	return slices.Compact(endpoints), slices.Compact(paths)
}

// ReadsRuns lists the runs whose records s reads (dataset.run.run_id).
// A run of one project may read another project's outputs this way, so
// the server authorizes runs.read on each of them, in the project that
// owns it, before it accepts s.
func ReadsRuns(s *spec.Spec) []string {
	if r := s.Dataset.Run; r != nil {
		return []string{r.RunID}
	}
	return nil
}

// isolationOrder is spec.IsolationLevels with none (the host rung) first;
// rungIsolation is each rung's level (the sandbox rungs' Isolation).
var (
	isolationOrder = append([]string{"none"}, spec.IsolationLevels()...)
	rungIsolation  = map[string]string{
		"firecracker": "vm", "qemu": "vm", "smolvm": "vm", "docker": "container",
		"bwrap": "namespaced", "landlock": "process", "host": "none",
	}
)

// minIsolation is the weakest isolation a sandbox of this policy can
// get: the rungs are tried strongest first, so the weakest rung listed
// bounds it from below, and min_isolation refuses any weaker.
func minIsolation(sb spec.SandboxPolicy) string {
	ladder := sb.Ladder
	if len(ladder) == 0 {
		ladder = spec.DefaultLadderFor(sb.MinIsolation)
	}
	weakest := len(isolationOrder) - 1
	for _, rung := range ladder {
		lvl, ok := rungIsolation[rung]
		if !ok {
			lvl = "none" // an unknown rung: assume nothing
		}
		weakest = min(weakest, slices.Index(isolationOrder, lvl))
	}
	if i := slices.Index(isolationOrder, sb.MinIsolation); i > weakest {
		weakest = i
	}
	return isolationOrder[weakest]
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}
