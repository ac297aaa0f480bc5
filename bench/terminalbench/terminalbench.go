// Package terminalbench imports Terminal-Bench 1 tasks
// (terminal-bench://DIR?tasks=a,b) and grades them as Terminal-Bench's
// harness does.
//
// DIR is a dataset root: every folder below it holding a task.yaml is a
// task, named by its slash path relative to DIR (evoeval/76); ?tasks= takes
// those names or, when unique, a task folder's base name. Each task becomes
// a record whose input is task.yaml's instruction and whose
// metadata.environment is its Dockerfile translated (see package
// dockerfile), with the checker Terminal-Bench runs: tests/ and
// run-tests.sh copied to /tests after the agent, `bash /tests/run-tests.sh`
// in the task's working directory with TEST_DIR=/tests, and the output
// graded by Terminal-Bench's parser (ParsePytest for parser_name: pytest).
//
// Query parameters: tasks=a,b; image=REF (the image stands for the built
// Dockerfile: RUN steps are skipped); network=deny (no network for setup or
// agent; Terminal-Bench containers otherwise have the network).
package terminalbench

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"evals.si/bench/importer"
	"evals.si/dataset"
	"evals.si/dockerfile"
	"evals.si/spec"
)

// Scheme is the dataset URI scheme.
const Scheme = "terminal-bench"

// Register makes reg serve terminal-bench:// URIs.
func Register(reg *dataset.Registry) {
	reg.Register(Scheme, importer.Source(Importer{}, "tasks"))
}

// Importer imports Terminal-Bench 1 task folders.
type Importer struct{}

// Task is task.yaml, with Terminal-Bench's defaults.
type Task struct {
	Instruction          string   `yaml:"instruction"`
	AuthorName           string   `yaml:"author_name"`
	Difficulty           string   `yaml:"difficulty"`
	Category             string   `yaml:"category"`
	Tags                 []string `yaml:"tags"`
	ParserName           string   `yaml:"parser_name"`
	MaxAgentTimeoutSec   float64  `yaml:"max_agent_timeout_sec"`
	MaxTestTimeoutSec    float64  `yaml:"max_test_timeout_sec"`
	RunTestsInSameShell  bool     `yaml:"run_tests_in_same_shell"`
	DisableAsciinema     bool     `yaml:"disable_asciinema"`
	EstimatedDurationSec *float64 `yaml:"estimated_duration_sec"`
}

// Terminal-Bench's container paths (DockerComposeEnvVars).
var composeVars = map[string]string{
	"T_BENCH_TEST_DIR":                  "/tests",
	"T_BENCH_CONTAINER_LOGS_PATH":       "/logs",
	"T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/agent-logs",
}

// Import imports the tasks u names.
func (Importer) Import(ctx context.Context, u *url.URL, baseDir string) (*importer.Result, error) {
	q, err := importer.ParseQuery(u, "tasks")
	if err != nil {
		return nil, err
	}
	root, err := importer.Path(u, baseDir)
	if err != nil {
		return nil, err
	}
	all, err := findTasks(root)
	if err != nil {
		return nil, err
	}
	names, err := selectTasks(all, q.Names)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", root, err)
	}
	res := &importer.Result{}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rec, err := importTask(filepath.Join(root, filepath.FromSlash(name)), name, q)
		if err != nil {
			res.Refused = append(res.Refused, importer.Refusal{Task: name, Reason: importer.Reason(err)})
			continue
		}
		res.Records = append(res.Records, rec)
	}
	return res, nil
}

// findTasks lists the folders under root holding a task.yaml.
func findTasks(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if _, err := os.Stat(filepath.Join(p, "task.yaml")); err == nil {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
			return filepath.SkipDir // a task's own folders hold no tasks
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finding Terminal-Bench tasks in %s: %w", root, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no Terminal-Bench task (a folder with task.yaml) under %s", root)
	}
	sort.Strings(out)
	return out, nil
}

// selectTasks resolves ?tasks= names: a relative path, or a unique base name.
func selectTasks(all, want []string) ([]string, error) {
	if len(want) == 0 {
		return all, nil
	}
	var out []string
	for _, w := range want {
		var match []string
		for _, a := range all {
			if a == w || path.Base(a) == w {
				match = append(match, a)
			}
		}
		switch len(match) {
		case 0:
			_, err := importer.Select(all, []string{w})
			return nil, err
		case 1:
			out = append(out, match[0])
		default:
			return nil, fmt.Errorf("task name %q is ambiguous (%s): use the path", w, strings.Join(match, ", "))
		}
	}
	return out, nil
}

// compose is the part of docker-compose.yaml the importer reads.
type compose struct {
	Services map[string]service `yaml:"services"`
}

type service struct {
	Build       any    `yaml:"build"`
	Image       string `yaml:"image"`
	Environment any    `yaml:"environment"`
	WorkingDir  string `yaml:"working_dir"`
	NetworkMode string `yaml:"network_mode"`
}

func importTask(dir, name string, q importer.Query) (spec.Record, error) {
	b, err := os.ReadFile(filepath.Join(dir, "task.yaml"))
	if err != nil {
		return spec.Record{}, err
	}
	t := Task{ParserName: "pytest", MaxAgentTimeoutSec: 360, MaxTestTimeoutSec: 60}
	if err := yaml.Unmarshal(b, &t); err != nil {
		return spec.Record{}, fmt.Errorf("task.yaml: %w", err)
	}
	if strings.TrimSpace(t.Instruction) == "" {
		return spec.Record{}, fmt.Errorf("task.yaml has no instruction")
	}
	var parser string
	switch t.ParserName {
	case "pytest":
		parser = ParserPytest
	case "swebench":
		parser = ParserSWEBench
	default:
		return spec.Record{}, &dockerfile.RefusalError{Reason: fmt.Sprintf("parser_name %s: only Terminal-Bench's pytest and swebench parsers are implemented", t.ParserName)}
	}

	// docker-compose.yaml: one service (client), built from the Dockerfile.
	svc := service{Build: "."}
	if cb, err := os.ReadFile(filepath.Join(dir, "docker-compose.yaml")); err == nil {
		var c compose
		if err := yaml.Unmarshal(cb, &c); err != nil {
			return spec.Record{}, fmt.Errorf("docker-compose.yaml: %w", err)
		}
		if len(c.Services) > 1 {
			names := make([]string, 0, len(c.Services))
			for n := range c.Services {
				names = append(names, n)
			}
			sort.Strings(names)
			return spec.Record{}, &dockerfile.RefusalError{Reason: fmt.Sprintf("docker-compose.yaml has %d services (%s): tasks with several services are not supported", len(c.Services), strings.Join(names, ", "))}
		}
		for _, s := range c.Services {
			svc = s
		}
	}
	env, err := environment(dir, svc, q)
	if err != nil {
		return spec.Record{}, err
	}
	netMode := "allow"
	if svc.NetworkMode == "none" {
		netMode = "deny"
	}
	importer.SetNetwork(env, netMode, nil, q)
	// The harness copies the tests into /tests after the agent; the
	// directory is there from the start, as in Terminal-Bench's images.
	env.Setup = append(env.Setup, spec.SetupStep{Run: "mkdir -p /tests"})

	// The checker: tests/ and run-tests.sh to /tests, after the agent.
	tests := map[string]dockerfile.File{}
	if _, err := os.Stat(filepath.Join(dir, "tests")); err == nil {
		tf, err := importer.ReadTree(filepath.Join(dir, "tests"))
		if err != nil {
			return spec.Record{}, err
		}
		tests = importer.Rebase(tf, "/tests")
	}
	rt, err := os.ReadFile(filepath.Join(dir, "run-tests.sh"))
	if err != nil {
		return spec.Record{}, fmt.Errorf("reading run-tests.sh: %w", err)
	}
	tests["/tests/run-tests.sh"] = dockerfile.File{Data: rt, Mode: 0o755}
	files, fix := dockerfile.EncodeFiles(tests)
	run := testCommand(t.MaxTestTimeoutSec)
	if fix != "" {
		run = fix + " && " + run
	}
	env.Checker = &spec.Checker{
		Files:   files,
		Command: []string{"bash", "-c", run},
		Parser:  parser,
		// The tests' own limit is in the command; this one only catches a
		// sandbox that hangs past it.
		Timeout: spec.Duration(time.Duration(t.MaxTestTimeoutSec*float64(time.Second)) + testTimeoutGrace),
	}

	sol, err := solution(dir)
	if err != nil {
		return spec.Record{}, err
	}
	meta := map[string]spec.JSON{
		"environment":             importer.MustJSON(env),
		importer.MetaBenchmark:    importer.MustJSON("terminal-bench"),
		"difficulty":              importer.MustJSON(t.Difficulty),
		"category":                importer.MustJSON(t.Category),
		"max_agent_timeout_sec":   importer.MustJSON(t.MaxAgentTimeoutSec),
		"run_tests_in_same_shell": importer.MustJSON(t.RunTestsInSameShell),
	}
	if len(t.Tags) > 0 {
		meta["tags"] = importer.MustJSON(t.Tags)
	}
	if sol != nil {
		meta[importer.MetaSolution] = importer.MustJSON(sol)
	}
	return spec.Record{ID: name, Input: spec.Input{Text: t.Instruction}, Metadata: meta}, nil
}

// environment translates the client service's Dockerfile and applies the
// service's environment and working_dir.
func environment(dir string, svc service, q importer.Query) (*spec.Environment, error) {
	ctxDir, dfName := dir, "Dockerfile"
	switch b := svc.Build.(type) {
	case string:
		ctxDir = filepath.Join(dir, b)
	case map[string]any:
		if c, ok := b["context"].(string); ok {
			ctxDir = filepath.Join(dir, c)
		}
		if d, ok := b["dockerfile"].(string); ok {
			dfName = d
		}
	case nil:
		if svc.Image == "" {
			return nil, fmt.Errorf("docker-compose.yaml: the service has neither build nor image")
		}
	}
	var env *spec.Environment
	if svc.Build == nil && q.Image == "" {
		env = &spec.Environment{Image: expandVars(svc.Image)}
	} else {
		var err error
		env, err = importer.Environment(filepath.Join(ctxDir, dfName), ctxDir, q)
		if err != nil {
			return nil, err
		}
	}
	if env.Env == nil {
		env.Env = map[string]string{}
	}
	for k, v := range composeEnv(svc.Environment) {
		env.Env[k] = v
	}
	if svc.WorkingDir != "" {
		if env.Sandbox == nil {
			env.Sandbox = &spec.SandboxPolicy{}
		}
		env.Sandbox.Workdir = expandVars(svc.WorkingDir)
	}
	return env, nil
}

// composeEnv reads a service's environment (a list of K=V or a mapping),
// with Terminal-Bench's variables substituted.
func composeEnv(v any) map[string]string {
	out := map[string]string{}
	switch e := v.(type) {
	case []any:
		for _, it := range e {
			if s, ok := it.(string); ok {
				if k, val, ok := strings.Cut(s, "="); ok {
					out[k] = expandVars(val)
				}
			}
		}
	case map[string]any:
		for k, it := range e {
			out[k] = expandVars(fmt.Sprint(it))
		}
	}
	return out
}

func expandVars(s string) string {
	return os.Expand(s, func(k string) string { return composeVars[k] })
}

// solution reads solution.sh (run with bash, as Terminal-Bench's oracle
// does) or solution.yaml (its commands, run in order in one bash shell).
func solution(dir string) (*importer.Solution, error) {
	if b, err := os.ReadFile(filepath.Join(dir, "solution.sh")); err == nil {
		files, fix := dockerfile.EncodeFiles(map[string]dockerfile.File{"/oracle/solution.sh": {Data: b, Mode: 0o755}})
		return &importer.Solution{Files: files, Setup: fix, Command: "bash /oracle/solution.sh"}, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "solution.yaml"))
	if err != nil {
		return nil, nil
	}
	var steps []struct {
		Command string `yaml:"command"`
	}
	if err := yaml.Unmarshal(b, &steps); err != nil {
		return nil, fmt.Errorf("solution.yaml: %w", err)
	}
	var script strings.Builder
	for _, s := range steps {
		script.WriteString(s.Command)
		script.WriteByte('\n')
	}
	files, fix := dockerfile.EncodeFiles(map[string]dockerfile.File{"/oracle/solution.sh": {Data: []byte(script.String()), Mode: 0o755}})
	return &importer.Solution{Files: files, Setup: fix, Command: "bash /oracle/solution.sh"}, nil
}

// TestsTimedOut is the line the checker prints when run-tests.sh ran past
// max_test_timeout_sec. Terminal-Bench then records FailureMode
// TEST_TIMEOUT and does not parse the output: the trial is unresolved (a
// failure, counted), not an error. The checker command's own timeout
// would make it an infrastructure error, so the limit is applied inside
// the command, with timeout(1).
const TestsTimedOut = ">>>>> evalsi: run-tests.sh timed out (Terminal-Bench TEST_TIMEOUT)"

// testTimeoutGrace is how much longer than the tests' limit the checker
// command may run: timeout's -k grace and the file setup.
const testTimeoutGrace = time.Minute

// testCommand runs run-tests.sh as the harness does, bounded by the task's
// max_test_timeout_sec, as one brace group (so a file-decoding step can be
// put before it with &&). It exits 0 whatever the tests did, since
// Terminal-Bench grades the output, not the exit status; only a missing
// timeout(1) is exit 127 (the image lacks coreutils: an infrastructure
// error, not a score).
func testCommand(maxTestTimeoutSec float64) string {
	secs := strconv.FormatFloat(maxTestTimeoutSec, 'f', -1, 64)
	return fmt.Sprintf(`{
command -v timeout >/dev/null || { echo "evalsi: timeout(1) is not in the image; it bounds run-tests.sh by max_test_timeout_sec" >&2; exit 127; }
timeout -k 10 %s bash /tests/run-tests.sh
if [ $? -eq 124 ]; then echo %s; fi
exit 0
}`, secs, dockerfile.Quote(TestsTimedOut))
}
