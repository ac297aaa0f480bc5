// Package spec holds the run spec: the Go types of a run file (which double as
// the spec of a Kubernetes EvalRun), YAML loading with file:line:column errors,
// defaults, validation and the JSON Schema.
//
// Every type here is plain data with JSON tags: no interface-typed fields, so a
// spec round-trips through JSON unchanged and DeepCopy is exact.
package spec

// Spec is one run file.
type Spec struct {
	// Name labels the run in reports; defaults to the file's base name.
	Name        string       `json:"name,omitempty"`
	Dataset     Dataset      `json:"dataset"`
	Target      Target       `json:"target"`
	Harness     *Harness     `json:"harness,omitempty"`
	Environment *Environment `json:"environment,omitempty"`
	Evaluators  []Evaluator  `json:"evaluators,omitempty"`
	// Trials is how many times each record runs (default 1).
	Trials int `json:"trials,omitempty"`
	// Judge is the model that grades (llm-judge, code-quality, goal-completion).
	Judge *ModelRef `json:"judge,omitempty"`
	// Concurrency bounds trials in flight (default 2 × CPUs).
	Concurrency int `json:"concurrency,omitempty"`
	// TrialTimeout bounds one trial end to end (default 30m).
	TrialTimeout Duration `json:"trial_timeout,omitempty"`
	// Retries is how often a trial that hit an infrastructure error is retried
	// before it is reported as errored (default 2).
	Retries *int `json:"retries,omitempty"`
	// Caps bound how much of a trial's output the engine holds in memory:
	// command output, model responses and the in-memory copy of events
	// (the store keeps events whole).
	Caps *Caps `json:"caps,omitempty"`
	// Budget caps the whole run's spend: when the run's spend reaches
	// budget.usd (or budget.tokens) no further trial starts; the rest are
	// recorded as not started and a resume with a higher cap runs them.
	// wall_clock bounds the run from its start the same way.
	Budget *Budget `json:"budget,omitempty"`
}

// Caps are the run's output caps; zero or absent means the default. Output
// streams to the store; a cap bounds what one process holds at a time.
type Caps struct {
	// CommandOutputKB caps each of stdout and stderr of one sandbox command
	// (bash tool, setup, checker, a CLI agent), in KiB; what comes after is
	// dropped and the result says it was cut (default 1024, at most 1048576).
	CommandOutputKB int `json:"command_output_kb,omitempty"`
	// ModelResponseMB caps one model response body (streamed or not), in MiB;
	// a bigger one fails the call as an infrastructure error, never a score
	// (default 64, at most 4096).
	ModelResponseMB int `json:"model_response_mb,omitempty"`
	// EventTextKB caps each large text of an event (tool output, message
	// content, log text, checker output) in the engine's in-memory copy that
	// evaluators read, in KiB; the store keeps it whole (default 64, at most
	// 65536).
	EventTextKB int `json:"event_text_kb,omitempty"`
	// TrialMemoryMB caps all large texts of one trial attempt kept in memory,
	// in MiB; past it each further text is kept to 1 KiB, the store keeping
	// it whole (default 16, at most 65536).
	TrialMemoryMB int `json:"trial_memory_mb,omitempty"`
}

// IsAgentRun reports whether the spec describes an agent run: it has
// target.agent or harness.
func (s *Spec) IsAgentRun() bool { return s.Target.Agent != nil || s.Harness != nil }

// Dataset says where records come from: inline records, a JSONL file
// (relative to the spec file), or a URI of a registered scheme.
type Dataset struct {
	Records []Record `json:"records,omitempty"`
	Path    string   `json:"path,omitempty"`
	// URI names a registered scheme, e.g. swebench://data/test.parquet?instances=a,b.
	URI string `json:"uri,omitempty"`
	// Run takes the records of another run (its inputs, with its outputs in
	// metadata), for re-scoring and regression loops.
	Run *RunDataset `json:"run,omitempty"`
	// Traces builds records from production traces in a trace backend.
	Traces *TracesDataset `json:"traces,omitempty"`
}

// RunDataset is dataset: {run: {run_id, trial, all_trials}}: one record per
// record of the run, from trial Trial (default 0), or one per trial with
// AllTrials (ids <record>#<trial>).
type RunDataset struct {
	RunID     string `json:"run_id"`
	Trial     *int   `json:"trial,omitempty"`
	AllTrials bool   `json:"all_trials,omitempty"`
}

// TracesDataset is dataset: {traces: {service, policy, filter, lookback}}:
// one record per trace of Service within Lookback, read from a Jaeger query
// endpoint (URL) or OTLP JSON files (File, the OTel Collector file
// exporter's format), kept when Filter (CEL over the trace's root span of
// the service) holds and Policy samples it. A record's id is the trace id,
// its input the root span's gen_ai.input.messages (or OpenInference
// input.value), its expected gen_ai.output.messages (or output.value);
// package dataset/traces has the details.
type TracesDataset struct {
	Service string `json:"service"`
	// URL is the Jaeger query API's base URL (http://host:16686); File is
	// an OTLP JSON lines file or directory. Exactly one.
	URL  string `json:"url,omitempty"`
	File string `json:"file,omitempty"`
	// Filter is a CEL expression over span (name, attributes, status
	// "ok"|"error"|"unset", duration_ms, trace_id, span_id, parent_span_id,
	// kind, start, resource); empty keeps every trace. A trace it cannot be
	// evaluated on (a missing attribute) is skipped.
	Filter string `json:"filter,omitempty"`
	// Lookback bounds how far back traces are read (default 24h).
	Lookback Duration     `json:"lookback,omitempty"`
	Policy   *TracePolicy `json:"policy,omitempty"`
}

// TracePolicy samples traces reproducibly: a trace is kept when the hash
// of its trace id (the first 8 bytes of SHA-256 of the lowercase hex id, as
// a fraction of 2^64) falls below Sample (default 1, all). Limit keeps the
// newest Limit records (by the root span's start) after sampling and the
// filter; 0 keeps all.
type TracePolicy struct {
	Sample *float64 `json:"sample,omitempty"`
	Limit  int      `json:"limit,omitempty"`
	// ErrorsOnly keeps only traces whose root span has status error.
	ErrorsOnly bool `json:"errors_only,omitempty"`
}

// Record is one task or prompt.
type Record struct {
	ID string `json:"id"`
	// Input is a string or a list of chat messages.
	Input    Input           `json:"input"`
	Expected JSON            `json:"expected,omitempty"`
	Metadata map[string]JSON `json:"metadata,omitempty"`
}

// Input is a record's input: either Text or Messages is set.
type Input struct {
	Text     string         `json:"-"`
	Messages []InputMessage `json:"-"`
}

// InputMessage is one chat message of a record's input.
type InputMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ModelRef names a model behind a connector.
type ModelRef struct {
	// Connector is openai (any OpenAI-compatible base_url), anthropic or scripted.
	Connector string `json:"connector,omitempty"`
	Model     string `json:"model,omitempty"`
	BaseURL   string `json:"base_url,omitempty"`
	// APIKeyEnv names the environment variable holding the key (default
	// OPENAI_API_KEY or ANTHROPIC_API_KEY by connector).
	APIKeyEnv   string   `json:"api_key_env,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	// Timeout bounds one model call (default 10m).
	Timeout Duration `json:"timeout,omitempty"`
	// MaxRetries on 429/5xx and transport errors (default 4).
	MaxRetries *int `json:"max_retries,omitempty"`
	// Script drives the scripted connector; ScriptFile loads it from a YAML
	// file relative to the spec file.
	Script     *Script `json:"script,omitempty"`
	ScriptFile string  `json:"script_file,omitempty"`
}

// Target is what is evaluated: a model (connector + model), or an agent.
type Target struct {
	ModelRef
	Agent *Agent `json:"agent,omitempty"`
}

// Script is the scripted connector's (and scripted model server's) script.
// A call picks its reply list: Records[record id] when the record is known,
// else the first rule whose Contains occurs in the first user message, else
// Default. Within a list, the reply used is the one at the index equal to
// the number of assistant messages already in the conversation (the last one
// repeats), so replies are deterministic under any concurrency.
type Script struct {
	Default []ScriptReply            `json:"default,omitempty"`
	Records map[string][]ScriptReply `json:"records,omitempty"`
	Rules   []ScriptRule             `json:"rules,omitempty"`
}

// ScriptRule selects replies by a substring of the first user message.
type ScriptRule struct {
	Contains string        `json:"contains"`
	Replies  []ScriptReply `json:"replies"`
}

// ScriptReply is one assistant turn.
type ScriptReply struct {
	Content   string           `json:"content,omitempty"`
	ToolCalls []ScriptToolCall `json:"tool_calls,omitempty"`
	// InputTokens and OutputTokens override the estimated usage.
	InputTokens  int `json:"input_tokens,omitempty"`
	OutputTokens int `json:"output_tokens,omitempty"`
	// Status, when set, makes the model server answer with this HTTP status
	// (e.g. 429, 500) instead of the reply, once per distinct request; for
	// retry tests.
	Status int `json:"status,omitempty"`
}

// ScriptToolCall is a tool call in a scripted reply.
type ScriptToolCall struct {
	Name      string `json:"name"`
	Arguments JSON   `json:"arguments,omitempty"`
}

// Agent is the caller's own agent; exactly one kind is set.
type Agent struct {
	A2A       *A2AAgent       `json:"a2a,omitempty"`
	MCP       *MCPAgent       `json:"mcp,omitempty"`
	Responses *ResponsesAgent `json:"responses,omitempty"`
	HTTP      *HTTPAgent      `json:"http,omitempty"`
	CLI       *CLIAgent       `json:"cli,omitempty"`
	// Oracle applies the task's reference solution (benchmarks).
	Oracle *OracleAgent `json:"oracle,omitempty"`
}

type A2AAgent struct {
	URL string `json:"url"`
	// HeadersEnv maps a header name to the worker variable holding its value.
	HeadersEnv map[string]string `json:"headers_env,omitempty"`
}

type MCPAgent struct {
	URL      string `json:"url"`
	Tool     string `json:"tool"`
	Argument string `json:"argument,omitempty"`
}

type ResponsesAgent struct {
	BaseURL   string `json:"base_url"`
	Model     string `json:"model"`
	APIKeyEnv string `json:"api_key_env,omitempty"`
}

type HTTPAgent struct {
	URL          string            `json:"url"`
	Method       string            `json:"method,omitempty"`
	BodyTemplate string            `json:"body_template,omitempty"`
	OutputPath   string            `json:"output_path,omitempty"`
	MessagesPath string            `json:"messages_path,omitempty"`
	HeadersEnv   map[string]string `json:"headers_env,omitempty"`
}

type CLIAgent struct {
	// Command runs under sh -c in the sandbox's workdir; {instruction} is
	// replaced by the shell-quoted instruction, else it goes on stdin.
	Command string   `json:"command"`
	Install []string `json:"install,omitempty"`
	// EnvFrom maps a variable name inside the sandbox to the worker variable
	// that supplies it; nothing else of the worker's environment enters.
	EnvFrom      map[string]string `json:"env_from,omitempty"`
	AllowHosts   []string          `json:"allow_hosts,omitempty"`
	Timeout      Duration          `json:"timeout,omitempty"`
	OutputFormat string            `json:"output_format,omitempty"`
}

type OracleAgent struct{}

// Harness configures the harness that drives the agent.
type Harness struct {
	Builtin  *Builtin  `json:"builtin,omitempty"`
	External *External `json:"external,omitempty"`
}

// Builtin configures the built-in tool-calling agent.
type Builtin struct {
	MaxSteps int              `json:"max_steps,omitempty"`
	Budget   *Budget          `json:"budget,omitempty"`
	Pricing  map[string]Price `json:"pricing,omitempty"`
	// Instructions are appended to the system prompt.
	Instructions  string         `json:"instructions,omitempty"`
	Tools         *Tools         `json:"tools,omitempty"`
	UserSimulator *UserSimulator `json:"user_simulator,omitempty"`
	Recording     *Recording     `json:"recording,omitempty"`
	Escalation    *Escalation    `json:"escalation,omitempty"`
	// ToolCallMode is auto | native | prompted.
	ToolCallMode string `json:"tool_call_mode,omitempty"`
	// ToolCallFormat is tool_call_tags | fenced_shell | native_json.
	ToolCallFormat string `json:"tool_call_format,omitempty"`
}

// Budget holds stop conditions; zero means no limit.
type Budget struct {
	USD       float64  `json:"usd,omitempty"`
	Tokens    int      `json:"tokens,omitempty"`
	WallClock Duration `json:"wall_clock,omitempty"`
}

// Price is USD per million tokens.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

type Tools struct {
	MCP    []MCPServer `json:"mcp,omitempty"`
	Mocks  []MockTool  `json:"mocks,omitempty"`
	Faults []Fault     `json:"faults,omitempty"`
}

// MCPServer is reached over streamable HTTP (URL) or started as a stdio
// command (Command).
type MCPServer struct {
	Name    string            `json:"name,omitempty"`
	URL     string            `json:"url,omitempty"`
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

type MockTool struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Parameters  JSON   `json:"parameters,omitempty"`
	Response    JSON   `json:"response,omitempty"`
	// Responses are matched by arguments: exact JSON after key sorting.
	Responses []MockResponse `json:"responses,omitempty"`
}

type MockResponse struct {
	Arguments JSON `json:"arguments,omitempty"`
	Response  JSON `json:"response"`
}

type Fault struct {
	Tool string `json:"tool"`
	// Kind is error | timeout | malformed.
	Kind string  `json:"kind"`
	Rate float64 `json:"rate"`
}

type UserSimulator struct {
	Persona  string    `json:"persona,omitempty"`
	Goal     string    `json:"goal,omitempty"`
	MaxTurns int       `json:"max_turns,omitempty"`
	Judge    *ModelRef `json:"judge,omitempty"`
}

type Recording struct {
	// Mode is record | replay.
	Mode         string `json:"mode"`
	Dir          string `json:"dir"`
	BranchAtStep int    `json:"branch_at_step,omitempty"`
}

type Escalation struct {
	Allow []string `json:"allow,omitempty"`
}

// External runs another harness over the harness protocol; one of the
// three forms is set.
type External struct {
	Address string   `json:"address,omitempty"`
	Command []string `json:"command,omitempty"`
	Python  string   `json:"python,omitempty"`
}

// Environment is a task's sandboxed environment.
type Environment struct {
	// Image is an OCI reference (registry, oci-layout:PATH, docker-archive:PATH,
	// dir:PATH); empty means the host's system directories, read-only.
	Image string `json:"image,omitempty"`
	// Files: relative paths go to the workdir, absolute ones into the root.
	Files map[string]string `json:"files,omitempty"`
	// Setup runs once per distinct environment, then is snapshotted. Each
	// step is a shell command (run with /bin/sh -c as root) or {run, user}
	// to run it as another user of the image, as a Dockerfile's RUN after
	// USER does.
	Setup []SetupStep `json:"setup,omitempty"`
	// SetupNetwork is the network during setup: deny (default) | allow.
	SetupNetwork string            `json:"setup_network,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	// ImageMirrors rewrites image references before they are resolved, for
	// machines that cannot reach the registries tasks name: a key is a
	// reference or a prefix of one (docker.io/library/ubuntu:24.04,
	// docker.io/library/); the longest matching key wins and its value
	// replaces the matched part (another registry, or oci-layout:PATH).
	ImageMirrors map[string]string `json:"image_mirrors,omitempty"`
	// User is the user the agent's commands (and, unless they name their
	// own, the service's and the checker's) run as: a name or uid of the
	// image, with an optional :group or :gid, resolved in the sandbox's
	// /etc/passwd and /etc/group as docker exec -u does. Empty is root.
	User string `json:"user,omitempty"`
	// Service is the image's main process (a Dockerfile's ENTRYPOINT/CMD),
	// started in each trial's sandbox before the agent and kept running
	// until the sandbox closes.
	Service *Service `json:"service,omitempty"`
	// Healthcheck is waited on, after the service starts and before the
	// agent, as Docker's HEALTHCHECK is; failing it is an infrastructure
	// error with the check's output.
	Healthcheck    *Healthcheck   `json:"healthcheck,omitempty"`
	Sandbox        *SandboxPolicy `json:"sandbox,omitempty"`
	Checker        *Checker       `json:"checker,omitempty"`
	CommandTimeout Duration       `json:"command_timeout,omitempty"`
}

// SetupStep is one setup command; in a spec it is a string, or {run, user}
// to run it as a user other than root.
type SetupStep struct {
	Run string `json:"run"`
	// User is a name or uid of the image (optionally :group or :gid).
	User string `json:"user,omitempty"`
}

// Service is a long-running process of the task's image.
type Service struct {
	// Command is the process's argv (ENTRYPOINT followed by CMD or the
	// task's compose command, as Docker combines them).
	Command []string `json:"command"`
	// User runs it (default: environment.user).
	User string `json:"user,omitempty"`
	// Workdir is where it starts (default: the sandbox's workdir).
	Workdir string `json:"workdir,omitempty"`
}

// Healthcheck is a readiness check with Docker's HEALTHCHECK semantics:
// the command runs every interval (start_interval during start_period,
// when failures do not count) with timeout per attempt; retries
// consecutive failures fail it. Defaults are Docker's: 30s interval, 30s
// timeout, 0s start period, 5s start interval, 3 retries.
type Healthcheck struct {
	// Command is the check's argv; a shell string goes as [/bin/sh, -c, CMD].
	Command       []string `json:"command"`
	Interval      Duration `json:"interval,omitempty"`
	Timeout       Duration `json:"timeout,omitempty"`
	StartPeriod   Duration `json:"start_period,omitempty"`
	StartInterval Duration `json:"start_interval,omitempty"`
	Retries       int      `json:"retries,omitempty"`
	// User runs it (default: environment.user).
	User string `json:"user,omitempty"`
}

// SandboxPolicy is the sandbox's policy and limits.
type SandboxPolicy struct {
	Workdir string `json:"workdir,omitempty"`
	// Network is deny | allowlist | allow.
	Network    string   `json:"network,omitempty"`
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// MinIsolation is process | namespaced | container | vm.
	MinIsolation string `json:"min_isolation,omitempty"`
	MemoryMB     int    `json:"memory_mb,omitempty"`
	ReadOnlyRoot bool   `json:"read_only_root,omitempty"`
	// Ladder lists rungs strongest first (default firecracker, bwrap, landlock).
	Ladder []string `json:"ladder,omitempty"`
	// AllowUnsafeHost must be true for the host rung to be used.
	AllowUnsafeHost bool `json:"allow_unsafe_host,omitempty"`
	// Cgroup is auto (default) | off | a delegated cgroup v2 directory.
	Cgroup     string  `json:"cgroup,omitempty"`
	CgroupCPUs float64 `json:"cgroup_cpus,omitempty"`
	PidsMax    int     `json:"pids_max,omitempty"`
	FileSizeMB int     `json:"file_size_mb,omitempty"`
	// DiskMB caps the bytes the sandbox's writable layer may hold in all
	// (file_size_mb caps each file).
	DiskMB          int              `json:"disk_mb,omitempty"`
	ImageSignatures *ImageSignatures `json:"image_signatures,omitempty"`
	Firecracker     *MicroVM         `json:"firecracker,omitempty"`
	// QEMU configures the qemu rung: the same guest under QEMU's microvm
	// machine (KVM when usable, else software emulation), with the same
	// settings but jailer.
	QEMU *MicroVM `json:"qemu,omitempty"`
}

type ImageSignatures struct {
	Keys       []string `json:"keys"`
	AllowLocal bool     `json:"allow_local,omitempty"`
}

// MicroVM is a microVM rung's settings (sandbox.firecracker, sandbox.qemu).
type MicroVM struct {
	Kernel       string `json:"kernel,omitempty"`
	Guest        string `json:"guest,omitempty"`
	WarmPool     int    `json:"warm_pool,omitempty"`
	VCPUs        int    `json:"vcpus,omitempty"`
	MemoryMB     int    `json:"memory_mb,omitempty"`
	DefaultImage string `json:"default_image,omitempty"`
	Jailer       string `json:"jailer,omitempty"`
}

// Checker grades the end state after the agent finishes.
type Checker struct {
	// Files are written after the agent finishes (relative: the workdir).
	Files   map[string]string `json:"files,omitempty"`
	Command []string          `json:"command,omitempty"`
	// Parser is exit-code (default) | json | junit:<path> | module:function.
	Parser  string   `json:"parser,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
	// ParserArgs is handed to a module:function parser as it is: what a
	// grade depends on (SWE-bench's test lists) comes from the record this
	// way, never back through the sandbox.
	ParserArgs JSON `json:"parser_args,omitempty"`
	// Setup runs with /bin/sh -c as root after the files are written and
	// before the command (decoding binary files, setting modes): the
	// checker's files are the harness's, whatever user the command runs as.
	Setup []string `json:"setup,omitempty"`
	// User runs the command (default: environment.user).
	User string `json:"user,omitempty"`
	// Network is the checker's own network: deny | allowlist (with
	// allow_hosts) | allow; empty keeps the agent's.
	Network    string   `json:"network,omitempty"`
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// Fresh runs the checker in a new sandbox of the environment, restored
	// from its setup, instead of the agent's: only the agent's diff,
	// written to patch_file, carries over (SWE-bench grades this way).
	Fresh bool `json:"fresh,omitempty"`
	// PatchFile is where the agent's diff is written before the checker
	// runs (absolute, or relative to the workdir); required with fresh.
	PatchFile string `json:"patch_file,omitempty"`
}

// Evaluator names an evaluator and carries its options. Options that do not
// belong to the named evaluator are a validation error.
type Evaluator struct {
	Name string `json:"name"`
	// IgnoreCase: exact-match, includes.
	IgnoreCase bool `json:"ignore_case,omitempty"`
	// Pattern: regex (default: the record's expected value as a pattern).
	Pattern string `json:"pattern,omitempty"`
	// Rubric: llm-judge, goal-completion.
	Rubric string `json:"rubric,omitempty"`
	// Threshold: the score at or above which llm-judge passes (0..1).
	Threshold *float64 `json:"threshold,omitempty"`
	// Weights, MergeBar, MaxDiffChars: code-quality.
	Weights      map[string]float64 `json:"weights,omitempty"`
	MergeBar     *float64           `json:"merge_bar,omitempty"`
	MaxDiffChars int                `json:"max_diff_chars,omitempty"`
	// Mode: trajectory-match (exact | in-order | any-order | subset).
	Mode string `json:"mode,omitempty"`
	// MaxRepeats: loops (identical calls allowed before flagging).
	MaxRepeats int `json:"max_repeats,omitempty"`
}
