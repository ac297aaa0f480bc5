package spec

import (
	"fmt"
	"net"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// The valid values of the spec's enumerations. They are functions, not
// variables, so no caller can change them; the JSON Schema uses them too.

// Connectors lists target/judge connectors.
func Connectors() []string { return []string{"openai", "anthropic", "scripted"} }

// NetworkModes lists sandbox.network values.
func NetworkModes() []string { return []string{"deny", "allowlist", "allow"} }

// SetupNetworkModes lists environment.setup_network values.
func SetupNetworkModes() []string { return []string{"deny", "allow"} }

// IsolationLevels lists sandbox.min_isolation values, weakest first.
func IsolationLevels() []string { return []string{"process", "namespaced", "container", "vm"} }

// Rungs lists the sandbox.ladder rungs.
func Rungs() []string {
	return []string{"firecracker", "qemu", "smolvm", "bwrap", "landlock", "docker", "pod", "host"}
}

// HTTPAgentMethods lists target.agent.http.method values (any case).
func HTTPAgentMethods() []string { return []string{"POST", "PUT", "PATCH"} }

// RecordingModes lists harness.builtin.recording.mode values.
func RecordingModes() []string { return []string{"record", "replay"} }

// FaultKinds lists harness.builtin.tools.faults[].kind values.
func FaultKinds() []string { return []string{"error", "timeout", "malformed"} }

// ToolCallModes lists harness.builtin.tool_call_mode values.
func ToolCallModes() []string { return []string{"auto", "native", "prompted"} }

// ToolCallFormats lists harness.builtin.tool_call_format values.
func ToolCallFormats() []string { return []string{"tool_call_tags", "fenced_shell", "native_json"} }

// TrajectoryMatchModes lists the trajectory-match evaluator's modes.
func TrajectoryMatchModes() []string { return []string{"exact", "in-order", "any-order", "subset"} }

// EvaluatorNames lists the known evaluators.
func EvaluatorNames() []string {
	return []string{
		"exact-match", "includes", "regex", "json-valid", "llm-judge",
		"task-success", "code-quality", "policy-violations", "agent-efficiency",
		"tool-call-accuracy", "trajectory-match", "loops", "goal-completion",
	}
}

// EvaluatorNeedsJudge reports whether the named evaluator grades with the
// run's judge model.
func EvaluatorNeedsJudge(name string) bool {
	switch name {
	case "llm-judge", "code-quality", "goal-completion":
		return true
	}
	return false
}

// evaluatorOptions maps each Evaluator option (its JSON name) to the
// evaluators it belongs to.
func evaluatorOptions() map[string][]string {
	return map[string][]string{
		"ignore_case":    {"exact-match", "includes"},
		"pattern":        {"regex"},
		"rubric":         {"llm-judge", "goal-completion"},
		"threshold":      {"llm-judge"},
		"weights":        {"code-quality"},
		"merge_bar":      {"code-quality"},
		"max_diff_chars": {"code-quality"},
		"mode":           {"trajectory-match"},
		"max_repeats":    {"loops"},
	}
}

// ToolCallFormatAllowed reports whether a tool_call_format may be used with
// a tool_call_mode. The matrix ("" means unset, and is always allowed):
//
//	mode      tool_call_tags  fenced_shell  native_json
//	auto      yes             yes           yes
//	native    no              no            yes
//	prompted  yes             yes           no
//
// native uses the model's own tool-calling format, which only native_json
// parses; prompted injects a text protocol, which native_json is not.
func ToolCallFormatAllowed(mode, format string) bool {
	if format == "" {
		return true
	}
	switch mode {
	case "native":
		return format == "native_json"
	case "prompted":
		return format == "tool_call_tags" || format == "fenced_shell"
	}
	return true
}

var (
	// module:function, where module is a dotted Python (or Go registry) name.
	parserFuncRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$`)
)

// ParserSyntaxOK reports whether a checker parser name is well formed:
// exit-code, json, junit:<path> or <module>:<function>. Whether the name
// resolves is the checker's business.
func ParserSyntaxOK(p string) bool {
	switch {
	case p == "exit-code", p == "json":
		return true
	case strings.HasPrefix(p, "junit:"):
		return strings.TrimSpace(strings.TrimPrefix(p, "junit:")) != ""
	}
	return parserFuncRE.MatchString(p)
}

// Validate checks the spec as a whole: required fields, enumerations,
// combinations, evaluator options and judges. Call it after defaults and
// after any overrides (the CLI's --judge-model). Errors name field paths;
// File.Validate gives the same errors with file:line:column.
func (s *Spec) Validate() error {
	v := &validator{}
	v.spec(s)
	return v.errs.err()
}

// Validate is Spec.Validate with every error positioned in the file.
func (f *File) Validate() error {
	v := &validator{f: f}
	v.spec(f.Spec)
	return v.errs.err()
}

// Validate checks an environment on its own (the dataset package checks a
// record's merged environment this way).
func (e *Environment) Validate() error {
	v := &validator{}
	v.environment("environment", e)
	return v.errs.err()
}

type validator struct {
	f    *File // nil for a spec not loaded from a file
	errs Errors
}

func (v *validator) add(path, hint, format string, args ...any) {
	v.errs = append(v.errs, v.f.newError(path, hint, format, args...))
}

// addKey is add for a problem with a map's key: it points at the key, not
// at its value.
func (v *validator) addKey(path, hint, format string, args ...any) {
	e := v.f.newError(path, hint, format, args...)
	if v.f != nil {
		p := v.f.keyPos(path)
		e.Line, e.Column = p.Line, p.Column
	}
	v.errs = append(v.errs, e)
}

// enum checks that got is one of values; empty is left to the caller.
func (v *validator) enum(path, what, got string, values []string) {
	if got != "" && !slices.Contains(values, got) {
		v.add(path, enumHint(got, values), "bad %s %q", what, got)
	}
}

func (v *validator) nonNegative(path string, n float64) {
	if n < 0 {
		v.add(path, "use 0 or a positive number", "%s is negative (%v)", path, n)
	}
}

// where names the place of path for a message positioned at from, when
// the message names two places: its line, or its column when both are on
// one line (a flow list such as ladder: [bwrap, bwrap]); its field path
// for a spec not loaded from a file.
func (v *validator) where(path, from string) string {
	if v.f != nil {
		if p := v.f.Pos(path); p.IsValid() {
			if p.Line == v.f.Pos(from).Line {
				return "column " + strconv.Itoa(p.Column)
			}
			return "line " + strconv.Itoa(p.Line)
		}
	}
	return path
}

func (v *validator) spec(s *Spec) {
	if s == nil {
		v.add("", "", "no spec")
		return
	}
	if s.Trials < 1 {
		v.add("trials", "trials is how many times each record runs: use 1 or more, or leave it out for 1", "trials must be at least 1 (it is %d)", s.Trials)
	}
	if s.Concurrency < 1 {
		v.add("concurrency", "concurrency bounds the trials in flight: use 1 or more, or leave it out for 2 × CPUs", "concurrency must be at least 1 (it is %d)", s.Concurrency)
	}
	if s.Retries != nil && *s.Retries < 0 {
		v.add("retries", "retries is how often a trial that hit an infrastructure error runs again: use 0 for none, or leave it out for 2", "retries is negative (%d)", *s.Retries)
	}
	if s.Caps != nil {
		v.caps(s.Caps)
	}
	v.runBudget(s.Budget) // spec/budget.go
	v.dataset(&s.Dataset)
	v.target(s)
	if s.Judge != nil {
		v.modelRef("judge", s.Judge)
	}
	if s.Harness != nil {
		v.harness(s)
	}
	if s.Environment != nil {
		v.environment("environment", s.Environment)
	}
	v.evaluators(s)
}

func (v *validator) caps(c *Caps) {
	for _, f := range capFields() {
		if n := f.value(c); n < 0 || n > f.max {
			v.add("caps."+f.name, fmt.Sprintf("use 1 to %d %s, or 0 for the default (%d %s)", f.max, f.unit, f.def, f.unit),
				"caps.%s %d is out of range", f.name, n)
		}
	}
}

func (v *validator) dataset(d *Dataset) {
	var set []string
	if d.Records != nil {
		set = append(set, "records")
	}
	if d.Path != "" {
		set = append(set, "path")
	}
	if d.URI != "" {
		set = append(set, "uri")
	}
	if d.Run != nil {
		set = append(set, "run")
		if strings.TrimSpace(d.Run.RunID) == "" {
			v.add("dataset.run.run_id", "name the run whose records to take (evalsi runs list)", "dataset.run needs run_id")
		}
		if d.Run.Trial != nil && *d.Run.Trial < 0 {
			v.add("dataset.run.trial", "trials count from 0", "dataset.run.trial %d is negative", *d.Run.Trial)
		}
		if d.Run.Trial != nil && d.Run.AllTrials {
			v.add("dataset.run.all_trials", "use trial or all_trials, not both", "dataset.run has both trial and all_trials")
		}
	}
	if t := d.Traces; t != nil {
		set = append(set, "traces")
		if strings.TrimSpace(t.Service) == "" {
			v.add("dataset.traces.service", "name the service whose traces to read", "dataset.traces needs service")
		}
		if (t.URL == "") == (t.File == "") {
			v.add("dataset.traces", "give url (a Jaeger query endpoint) or file (OTLP JSON), not both", "dataset.traces needs exactly one of url or file")
		}
		if t.Lookback < 0 {
			v.add("dataset.traces.lookback", "write a positive duration such as 24h", "dataset.traces.lookback is negative")
		}
		if p := t.Policy; p != nil {
			if p.Sample != nil && (*p.Sample < 0 || *p.Sample > 1) {
				v.add("dataset.traces.policy.sample", "a rate from 0 to 1", "dataset.traces.policy.sample %v is outside 0..1", *p.Sample)
			}
			if p.Limit < 0 {
				v.add("dataset.traces.policy.limit", "0 means no limit", "dataset.traces.policy.limit is negative")
			}
		}
	}
	switch len(set) {
	case 0:
		v.add("dataset", "give inline records, a JSONL path, a uri, a run or traces", "dataset needs records, path, uri, run or traces")
	case 1:
		if d.Records != nil && len(d.Records) == 0 {
			v.add("dataset.records", "add records, or use path or uri", "dataset.records is empty")
		}
	default:
		v.add("dataset."+set[1], "use exactly one of records, path, uri, run or traces", "dataset has both %s and %s", set[0], set[1])
	}
	if d.URI != "" {
		if u, err := url.Parse(d.URI); err != nil || u.Scheme == "" {
			v.add("dataset.uri", "write it as scheme://..., e.g. swebench://data/test.jsonl", "dataset.uri %q has no scheme", d.URI)
		}
	}
	first := map[string]int{}
	for i, r := range d.Records {
		p := indexPath("dataset.records", i)
		if strings.TrimSpace(r.ID) == "" {
			v.add(p+".id", "give every record a unique id", "record has no id")
			continue
		}
		if j, dup := first[r.ID]; dup {
			v.add(p+".id", "give every record a unique id", "duplicate record id %q (first at %s)", r.ID, v.where(indexPath("dataset.records", j)+".id", p+".id"))
			continue
		}
		first[r.ID] = i
		if r.Input.Text == "" && r.Input.Messages == nil {
			v.add(p, "give the task or prompt as input", "record %q has no input", r.ID)
		}
	}
}

func (v *validator) target(s *Spec) {
	t := &s.Target
	hasModel := t.Connector != "" || t.Model != ""
	switch {
	case hasModel && t.Agent != nil:
		v.add("target.agent", "use either connector and model, or agent", "target names both a model and an agent")
	case t.Agent != nil:
		v.agent("target.agent", t.Agent)
	case hasModel:
		v.modelRef("target", &t.ModelRef)
	default:
		v.add("target", "set connector and model (e.g. connector: openai, model: gpt-5), or agent", "target names no model and no agent")
	}
}

func (v *validator) modelRef(path string, m *ModelRef) {
	switch {
	case m.Connector == "":
		v.add(path, oneOf(Connectors()), "%s needs a connector", path)
	default:
		v.enum(path+".connector", "connector", m.Connector, Connectors())
	}
	if m.Model == "" {
		v.add(path, "set model to the provider's model name, e.g. model: gpt-5", "%s needs a model", path)
	}
	if m.Connector == "scripted" {
		switch {
		case m.Script == nil && m.ScriptFile == "":
			v.add(path, "give script (inline) or script_file", "the scripted connector needs a script")
		case m.Script != nil && m.ScriptFile != "":
			v.add(path+".script_file", "give script or script_file, not both", "%s has both script and script_file", path)
		}
	} else if m.Connector != "" && (m.Script != nil || m.ScriptFile != "") {
		field := "script"
		if m.Script == nil {
			field = "script_file"
		}
		v.add(path+"."+field, "set connector: scripted, or remove it", "%s is only used by the scripted connector", field)
	}
	if m.BaseURL != "" {
		if u, err := url.Parse(m.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(path+".base_url", "write it as http(s)://host[:port]/path", "bad base_url %q", m.BaseURL)
		}
	}
	if m.Temperature != nil {
		v.nonNegative(path+".temperature", *m.Temperature)
	}
	v.nonNegative(path+".max_tokens", float64(m.MaxTokens))
	if m.MaxRetries != nil {
		v.nonNegative(path+".max_retries", float64(*m.MaxRetries))
	}
}

func (v *validator) agent(path string, a *Agent) {
	var kinds []string
	if a.A2A != nil {
		kinds = append(kinds, "a2a")
		if a.A2A.URL == "" {
			v.add(path+".a2a", "set url to the agent's A2A endpoint, e.g. http://127.0.0.1:9999", "the a2a agent needs url")
		}
	}
	if a.MCP != nil {
		kinds = append(kinds, "mcp")
		if a.MCP.URL == "" || a.MCP.Tool == "" {
			v.add(path+".mcp", "set url (the MCP server's streamable HTTP endpoint) and tool (the tool that takes a task)", "the mcp agent needs url and tool")
		}
	}
	if a.Responses != nil {
		kinds = append(kinds, "responses")
		if a.Responses.BaseURL == "" || a.Responses.Model == "" {
			v.add(path+".responses", "set base_url (e.g. http://127.0.0.1:8000/v1) and model", "the responses agent needs base_url and model")
		}
	}
	if a.HTTP != nil {
		kinds = append(kinds, "http")
		if a.HTTP.URL == "" {
			v.add(path+".http", "set url to the endpoint that takes a task", "the http agent needs url")
		}
		if m := a.HTTP.Method; m != "" && !slices.Contains(HTTPAgentMethods(), strings.ToUpper(m)) {
			v.add(path+".http.method", "use POST (the default), PUT or PATCH: the task is sent in the JSON body", "bad method %q", m)
		}
	}
	if a.CLI != nil {
		kinds = append(kinds, "cli")
		if strings.TrimSpace(a.CLI.Command) == "" {
			v.add(path+".cli", "set command, e.g. command: claude -p {instruction}", "the cli agent needs command")
		}
		for i, h := range a.CLI.AllowHosts {
			v.hostPort(indexPath(path+".cli.allow_hosts", i), h)
		}
	}
	if a.Oracle != nil {
		kinds = append(kinds, "oracle")
	}
	switch len(kinds) {
	case 0:
		v.add(path, "set one of a2a, mcp, responses, http, cli or oracle", "agent names no kind")
	case 1:
	default:
		v.add(path+"."+kinds[1], "an agent has exactly one kind", "agent has both %s and %s", kinds[0], kinds[1])
	}
}

func (v *validator) hostPort(path, h string) {
	host, port, err := net.SplitHostPort(h)
	if err != nil || host == "" {
		v.add(path, "write host:port, e.g. pypi.org:443", "bad host %q", h)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		v.add(path, "the port is a number from 1 to 65535", "bad port in %q", h)
	}
}

func (v *validator) harness(s *Spec) {
	h := s.Harness
	switch {
	case h.Builtin != nil && h.External != nil:
		v.add("harness.external", "use builtin or external, not both", "harness has both builtin and external")
	case h.Builtin == nil && h.External == nil:
		v.add("harness", "set builtin: {} for the built-in agent, or external", "harness names neither builtin nor external")
	}
	if e := h.External; e != nil {
		n := 0
		for _, set := range []bool{e.Address != "", len(e.Command) > 0, e.Python != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			v.add("harness.external", "set address (a harness already running), command (one to start) or python (module:Class)", "harness.external needs exactly one of address, command or python")
		}
		if e.Python != "" && !parserFuncRE.MatchString(e.Python) {
			v.add("harness.external.python", "write it as module:Class, e.g. evalsi_taubench:TauBenchHarness", "bad python class %q", e.Python)
		}
	}
	if b := h.Builtin; b != nil {
		v.builtin(s, "harness.builtin", b)
	}
}

func (v *validator) builtin(s *Spec, path string, b *Builtin) {
	v.nonNegative(path+".max_steps", float64(b.MaxSteps))
	if bu := b.Budget; bu != nil {
		v.nonNegative(path+".budget.usd", bu.USD)
		v.nonNegative(path+".budget.tokens", float64(bu.Tokens))
	}
	for k, p := range b.Pricing {
		pp := childPath(path+".pricing", k)
		v.nonNegative(pp+".input", p.Input)
		v.nonNegative(pp+".output", p.Output)
	}
	if t := b.Tools; t != nil {
		servers := map[string]int{}
		for i, m := range t.MCP {
			p := indexPath(path+".tools.mcp", i)
			if (m.URL == "") == (len(m.Command) == 0) {
				v.add(p, "give url for a streamable HTTP server, or command for one over stdio", "an MCP server needs exactly one of url or command")
			}
			if m.Name == "" {
				continue
			}
			if j, dup := servers[m.Name]; dup {
				v.add(p+".name", "give each server its own name: its tools are exposed as <name>__<tool>", "duplicate MCP server name %q (first at %s)", m.Name, v.where(indexPath(path+".tools.mcp", j)+".name", p+".name"))
			} else {
				servers[m.Name] = i
			}
		}
		names := map[string]int{}
		for i, m := range t.Mocks {
			p := indexPath(path+".tools.mocks", i)
			if m.Name == "" {
				v.add(p, "set name to the tool's name as the agent calls it", "a mock tool needs a name")
			} else if j, dup := names[m.Name]; dup {
				v.add(p+".name", "give each mock tool its own name", "duplicate mock tool %q (first at %s)", m.Name, v.where(indexPath(path+".tools.mocks", j)+".name", p+".name"))
			} else {
				names[m.Name] = i
			}
			if !m.Response.IsZero() && len(m.Responses) > 0 {
				v.add(p+".responses", "give response or responses, not both", "mock tool %q has both response and responses", m.Name)
			}
		}
		for i, f := range t.Faults {
			p := indexPath(path+".tools.faults", i)
			if f.Tool == "" {
				v.add(p, "name the tool to fail, e.g. tool: bash", "a fault needs tool")
			}
			if f.Kind == "" {
				v.add(p, oneOf(FaultKinds()), "a fault needs kind")
			}
			v.enum(p+".kind", "fault kind", f.Kind, FaultKinds())
			if f.Rate < 0 || f.Rate > 1 {
				v.add(p+".rate", "a rate is a fraction from 0 to 1", "fault rate %v is out of range", f.Rate)
			}
		}
	}
	if u := b.UserSimulator; u != nil {
		p := path + ".user_simulator"
		if u.MaxTurns < 1 {
			v.add(p+".max_turns", "set max_turns to the most user turns a conversation may have", "user_simulator.max_turns must be at least 1")
		}
		if u.Judge != nil {
			v.modelRef(p+".judge", u.Judge)
		} else if s.Judge == nil {
			v.add(p, "set judge (or user_simulator.judge), or pass --judge-provider and --judge-model", "the user simulator needs a judge model")
		}
	}
	if r := b.Recording; r != nil {
		p := path + ".recording"
		if r.Mode == "" {
			v.add(p, oneOf(RecordingModes()), "recording needs mode")
		}
		v.enum(p+".mode", "recording mode", r.Mode, RecordingModes())
		if r.Dir == "" {
			v.add(p, "set dir to the directory that holds the recordings (relative to the spec file)", "recording needs dir")
		}
		v.nonNegative(p+".branch_at_step", float64(r.BranchAtStep))
		if r.BranchAtStep > 0 && r.Mode == "record" {
			v.add(p+".branch_at_step", "use it with mode: replay", "branch_at_step only applies when replaying")
		}
	}
	v.enum(path+".tool_call_mode", "tool_call_mode", b.ToolCallMode, ToolCallModes())
	v.enum(path+".tool_call_format", "tool_call_format", b.ToolCallFormat, ToolCallFormats())
	if slices.Contains(ToolCallModes(), b.ToolCallMode) && slices.Contains(ToolCallFormats(), b.ToolCallFormat) &&
		!ToolCallFormatAllowed(b.ToolCallMode, b.ToolCallFormat) {
		hint := "native mode takes native_json"
		if b.ToolCallMode == "prompted" {
			hint = "prompted mode takes tool_call_tags or fenced_shell"
		}
		v.add(path+".tool_call_format", hint, "tool_call_format %s does not work with tool_call_mode %s", b.ToolCallFormat, b.ToolCallMode)
	}
}

func (v *validator) environment(path string, e *Environment) {
	v.enum(path+".setup_network", "setup_network", e.SetupNetwork, SetupNetworkModes())
	for k := range e.Files {
		if strings.TrimSpace(k) == "" {
			v.add(path+".files", "key each file by its path, relative to the workdir", "a file needs a name")
		}
	}
	for k := range e.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			v.addKey(childPath(path+".env", k), "a name must not be empty or hold = or NUL", "bad environment variable name %q", k)
		}
	}
	if sb := e.Sandbox; sb != nil {
		v.sandbox(path+".sandbox", sb)
	}
	for i, st := range e.Setup {
		v.user(indexPath(path+".setup", i)+".user", st.User)
	}
	v.user(path+".user", e.User)
	if s := e.Service; s != nil {
		p := path + ".service"
		if !nonEmptyArgv(s.Command) {
			v.add(p+".command", "give the service's argv, e.g. [python3, server.py] (a Dockerfile's ENTRYPOINT followed by CMD)", "service.command is empty")
		}
		v.user(p+".user", s.User)
		if s.Workdir != "" && !strings.HasPrefix(s.Workdir, "/") {
			v.add(p+".workdir", "write an absolute path inside the sandbox, e.g. /app", "service.workdir %q is not absolute", s.Workdir)
		}
	}
	if h := e.Healthcheck; h != nil {
		p := path + ".healthcheck"
		if !nonEmptyArgv(h.Command) {
			v.add(p+".command", "give the check's argv, e.g. [curl, -sf, http://localhost:8000/health], or [/bin/sh, -c, CMD]", "healthcheck.command is empty")
		}
		if h.Retries < 0 {
			v.add(p+".retries", "use 0 for Docker's default (3), or a positive count", "healthcheck.retries must not be negative")
		}
		for _, d := range []struct {
			name string
			d    Duration
		}{{"interval", h.Interval}, {"timeout", h.Timeout}, {"start_period", h.StartPeriod}, {"start_interval", h.StartInterval}} {
			if d.d < 0 {
				v.add(p+"."+d.name, "use a positive duration such as 5s, or leave it out for Docker's default", "healthcheck.%s must not be negative", d.name)
			}
		}
		v.user(p+".user", h.User)
	}
	if c := e.Checker; c != nil {
		p := path + ".checker"
		if c.Parser != "" && !ParserSyntaxOK(c.Parser) {
			v.add(p+".parser", "use exit-code, json, junit:<path> or module:function", "bad parser %q", c.Parser)
		}
		v.user(p+".user", c.User)
		v.enum(p+".network", "checker network", c.Network, NetworkModes())
		switch {
		case c.Network == "allowlist" && len(c.AllowHosts) == 0:
			v.add(p+".network", "list the hosts the checker may reach in checker.allow_hosts as host:port", "checker network allowlist needs allow_hosts")
		case c.Network != "allowlist" && len(c.AllowHosts) > 0:
			v.add(p+".allow_hosts", "set checker.network: allowlist", "checker.allow_hosts is only used with checker network: allowlist")
		}
		for i, h := range c.AllowHosts {
			v.hostPort(indexPath(p+".allow_hosts", i), h)
		}
		if c.Fresh && strings.TrimSpace(c.PatchFile) == "" {
			v.add(p+".patch_file", "set patch_file to where the checker reads the agent's diff, e.g. /tmp/agent.patch", "a fresh checker needs patch_file: the agent's diff is all that reaches it")
		}
		if c.PatchFile != "" && strings.ContainsRune(c.PatchFile, 0) {
			v.add(p+".patch_file", "a path cannot hold a NUL byte", "bad patch_file %q", c.PatchFile)
		}
	}
}

// user checks a user field: a name or numeric id, optionally :group or
// :gid, as docker run -u takes it. Empty is the default and passes.
func (v *validator) user(path, u string) {
	if u == "" {
		return
	}
	name, group, hasGroup := strings.Cut(u, ":")
	bad := name == "" || (hasGroup && group == "") || strings.Contains(group, ":")
	for _, r := range u {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			bad = true
		}
	}
	if bad {
		v.add(path, "write a user name or uid of the image, optionally with :group or :gid (e.g. app, 1000, app:app, 1000:1000)", "bad user %q", u)
	}
}

// nonEmptyArgv reports whether argv names a program.
func nonEmptyArgv(argv []string) bool {
	return len(argv) > 0 && strings.TrimSpace(argv[0]) != ""
}

func (v *validator) sandbox(path string, sb *SandboxPolicy) {
	v.enum(path+".network", "network", sb.Network, NetworkModes())
	switch {
	case sb.Network == "allowlist" && len(sb.AllowHosts) == 0:
		v.add(path+".network", "list the hosts in allow_hosts as host:port", "network allowlist needs allow_hosts")
	case sb.Network != "allowlist" && len(sb.AllowHosts) > 0:
		v.add(path+".allow_hosts", "set network: allowlist", "allow_hosts is only used with network: allowlist")
	}
	for i, h := range sb.AllowHosts {
		v.hostPort(indexPath(path+".allow_hosts", i), h)
	}
	v.enum(path+".min_isolation", "min_isolation", sb.MinIsolation, IsolationLevels())
	seen := map[string]bool{}
	for i, r := range sb.Ladder {
		p := indexPath(path+".ladder", i)
		if !slices.Contains(Rungs(), r) {
			v.add(p, enumHint(r, Rungs()), "bad rung %q", r)
			continue
		}
		if seen[r] {
			v.add(p, "list each rung once", "rung %q is listed twice (first at %s)", r, v.where(indexPath(path+".ladder", slices.Index(sb.Ladder, r)), p))
		}
		seen[r] = true
		if r == "host" && !sb.AllowUnsafeHost {
			v.add(p, "set allow_unsafe_host: true if you accept running agents with no isolation", "the host rung has no isolation")
		}
	}
	if c := sb.Cgroup; c != "" && c != "auto" && c != "off" && !strings.HasPrefix(c, "/") {
		v.add(path+".cgroup", "use auto, off, or the absolute path of a delegated cgroup v2 directory", "bad cgroup %q", c)
	}
	v.nonNegative(path+".memory_mb", float64(sb.MemoryMB))
	v.nonNegative(path+".cgroup_cpus", sb.CgroupCPUs)
	v.nonNegative(path+".pids_max", float64(sb.PidsMax))
	v.nonNegative(path+".file_size_mb", float64(sb.FileSizeMB))
	v.nonNegative(path+".disk_mb", float64(sb.DiskMB))
	if is := sb.ImageSignatures; is != nil && len(is.Keys) == 0 {
		v.add(path+".image_signatures", "list cosign public keys (files or PEM text)", "image_signatures needs keys")
	}
	for _, vmb := range []struct {
		name string
		fc   *MicroVM
	}{{"firecracker", sb.Firecracker}, {"qemu", sb.QEMU}} {
		name, fc := vmb.name, vmb.fc
		if fc == nil {
			continue
		}
		p := path + "." + name
		v.nonNegative(p+".warm_pool", float64(fc.WarmPool))
		v.nonNegative(p+".vcpus", float64(fc.VCPUs))
		v.nonNegative(p+".memory_mb", float64(fc.MemoryMB))
		if name == "qemu" && fc.Jailer != "" {
			v.add(p+".jailer", "remove it", "the jailer is Firecracker's; the qemu rung runs QEMU under its own seccomp sandbox")
		}
	}
}

func (v *validator) evaluators(s *Spec) {
	names := map[string]int{}
	opts := evaluatorOptions()
	et := reflect.TypeFor[Evaluator]()
	for i, ev := range s.Evaluators {
		p := indexPath("evaluators", i)
		if ev.Name == "" {
			v.add(p, oneOf(EvaluatorNames()), "an evaluator needs a name")
			continue
		}
		if !slices.Contains(EvaluatorNames(), ev.Name) {
			v.add(p+".name", enumHint(ev.Name, EvaluatorNames()), "unknown evaluator %q", ev.Name)
			continue
		}
		if j, dup := names[ev.Name]; dup {
			v.add(p+".name", "list each evaluator once, with all its options in that entry", "evaluator %q is listed twice (first at %s)", ev.Name, v.where(indexPath("evaluators", j)+".name", p+".name"))
		}
		names[ev.Name] = i
		// Options that do not belong to this evaluator.
		rv := reflect.ValueOf(ev)
		for _, f := range fieldsOf(et) {
			if f.name == "name" {
				continue
			}
			fv := rv.FieldByIndex(fieldIndex(et, f.name))
			if fv.IsZero() {
				continue
			}
			if owners := opts[f.name]; !slices.Contains(owners, ev.Name) {
				v.add(p+"."+f.name, fmt.Sprintf("%s is an option of %s", f.name, strings.Join(owners, ", ")), "evaluator %s takes no option %s", ev.Name, f.name)
			}
		}
		if EvaluatorNeedsJudge(ev.Name) && s.Judge == nil {
			v.add(p+".name", "set judge: {connector, model} in the spec, or pass --judge-provider and --judge-model", "evaluator %s needs a judge model", ev.Name)
		}
		if ev.Threshold != nil && (*ev.Threshold < 0 || *ev.Threshold > 1) {
			v.add(p+".threshold", "a threshold is from 0 to 1", "threshold %v is out of range", *ev.Threshold)
		}
		if ev.MergeBar != nil && (*ev.MergeBar < 0 || *ev.MergeBar > 5) {
			v.add(p+".merge_bar", "dimensions are scored 1 to 5", "merge_bar %v is out of range", *ev.MergeBar)
		}
		for k, w := range ev.Weights {
			v.nonNegative(childPath(p+".weights", k), w)
		}
		v.nonNegative(p+".max_diff_chars", float64(ev.MaxDiffChars))
		v.nonNegative(p+".max_repeats", float64(ev.MaxRepeats))
		v.enum(p+".mode", "trajectory-match mode", ev.Mode, TrajectoryMatchModes())
		if ev.Pattern != "" {
			if _, err := regexp.Compile(ev.Pattern); err != nil {
				v.add(p+".pattern", "write a Go (RE2) regular expression; YAML single quotes keep backslashes as written", "bad pattern: %v", err)
			}
		}
	}
}

func fieldIndex(t reflect.Type, jsonName string) []int {
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == jsonName {
			return sf.Index
		}
	}
	return nil
}
