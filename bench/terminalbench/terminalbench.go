// Package terminalbench imports Terminal-Bench 1 tasks
// (terminal-bench://DIR?tasks=a,b) and grades them as Terminal-Bench's
// harness does.
//
// DIR is a dataset root: every folder below it holding a task.yaml is a
// task, named by its slash path relative to DIR (evoeval/76); ?tasks= takes
// those names or, when unique, a task folder's base name. Each task becomes
// a record whose input is task.yaml's instruction and whose
// metadata.environment is its Dockerfile translated (see package
// dockerfile) with the client service of its docker-compose.yaml applied
// as compose applies it (environment, working_dir, user, resource limits,
// entrypoint and command), and with the checker Terminal-Bench runs:
// tests/ and run-tests.sh copied to /tests after the agent, `bash
// /tests/run-tests.sh` as root in the task's working directory with
// TEST_DIR=/tests, and the end of its output graded by Terminal-Bench's
// parser (ParsePytest for parser_name: pytest).
//
// Query parameters: tasks=a,b; image=REF (the image stands for the built
// Dockerfile: RUN steps are skipped); network=deny (no network for setup or
// agent; Terminal-Bench containers otherwise have the network).
package terminalbench

import (
	"context"
	"errors"
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
	"evals.si/sandbox"
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
		rec, notes, err := importTask(filepath.Join(root, filepath.FromSlash(name)), name, q)
		if err != nil {
			res.Refused = append(res.Refused, importer.Refusal{Task: name, Reason: importer.Reason(err)})
			continue
		}
		res.Records = append(res.Records, rec)
		res.Note(rec.ID, notes...)
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

func importTask(dir, name string, q importer.Query) (spec.Record, []string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "task.yaml"))
	if err != nil {
		return spec.Record{}, nil, err
	}
	t := Task{ParserName: "pytest", MaxAgentTimeoutSec: 360, MaxTestTimeoutSec: 60}
	if err := yaml.Unmarshal(b, &t); err != nil {
		return spec.Record{}, nil, fmt.Errorf("task.yaml: %w", err)
	}
	if strings.TrimSpace(t.Instruction) == "" {
		return spec.Record{}, nil, fmt.Errorf("task.yaml has no instruction")
	}
	var parser string
	switch t.ParserName {
	case "pytest":
		parser = ParserPytest
	case "swebench":
		parser = ParserSWEBench
	default:
		return spec.Record{}, nil, &dockerfile.RefusalError{Reason: fmt.Sprintf("parser_name %s: only Terminal-Bench's pytest and swebench parsers are implemented", t.ParserName)}
	}

	svc, unset, err := clientService(dir)
	if err != nil {
		return spec.Record{}, nil, err
	}
	env, notes, err := environment(dir, svc, q)
	if err != nil {
		return spec.Record{}, nil, err
	}
	if len(unset) > 0 {
		notes = append(notes, fmt.Sprintf("docker-compose.yaml reads host variable(s) %s, which are not passed in: they are unset here (defaults apply)", strings.Join(unset, ", ")))
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
			return spec.Record{}, nil, err
		}
		tests = importer.Rebase(tf, "/tests")
	}
	rt, err := os.ReadFile(filepath.Join(dir, "run-tests.sh"))
	if err != nil {
		return spec.Record{}, nil, fmt.Errorf("reading run-tests.sh: %w", err)
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
	// The harness runs the tests in a tmux session of their own, as root;
	// with run_tests_in_same_shell, in the agent's, as the agent's user.
	if !t.RunTestsInSameShell && !importer.SameUser(env.User, "") {
		env.Checker.User = "root"
	}

	sol, err := solution(dir)
	if err != nil {
		return spec.Record{}, nil, err
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
	return spec.Record{ID: name, Input: spec.Input{Text: t.Instruction}, Metadata: meta}, notes, nil
}

// clientService is the docker-compose.yaml service the harness runs the
// agent in (client, the only one): the template's when the task has no
// compose file. Tasks with several services are refused.
func clientService(dir string) (svc importer.ComposeService, unset []string, err error) {
	def := importer.ComposeService{Build: ".", Command: []any{"sh", "-c", "sleep infinity"}}
	cb, err := os.ReadFile(filepath.Join(dir, "docker-compose.yaml"))
	if errors.Is(err, fs.ErrNotExist) {
		return def, nil, nil
	}
	if err != nil {
		return def, nil, err
	}
	c, err := importer.ParseCompose(cb, composeVars)
	if err != nil {
		return def, nil, fmt.Errorf("docker-compose.yaml: %w", err)
	}
	// The harness's other variables (image and container names, host log
	// paths) name its own plumbing; any other comes from the host.
	for _, k := range c.Unset {
		if !strings.HasPrefix(k, "T_BENCH_") {
			unset = append(unset, k)
		}
	}
	switch names := c.Names(); len(names) {
	case 0:
		return def, nil, fmt.Errorf("docker-compose.yaml has no services")
	case 1:
		return c.Services[names[0]], unset, nil
	default:
		return def, nil, &dockerfile.RefusalError{Reason: fmt.Sprintf("docker-compose.yaml has %d services (%s): tasks with several services are not supported", len(names), strings.Join(names, ", "))}
	}
}

// appliedComposeKeys are the client service's keys the import applies
// (container_name and the log volumes are the harness's plumbing).
var appliedComposeKeys = []string{"build", "image", "container_name", "command", "entrypoint", "environment", "volumes", "working_dir", "user", "network_mode", "deploy"}

// environment translates the client service's Dockerfile and applies the
// service's environment, working_dir, user and main process as compose
// applies them to the container.
func environment(dir string, svc importer.ComposeService, q importer.Query) (*spec.Environment, []string, error) {
	var notes []string
	if un := svc.Unapplied(appliedComposeKeys...); len(un) > 0 {
		notes = append(notes, fmt.Sprintf("docker-compose.yaml: the service's %s not applied", strings.Join(un, ", ")))
	}
	// The harness mounts its log directories; a task's own mounts are not
	// applied.
	var mounts []string
	for _, v := range svc.VolumeTargets() {
		if v != composeVars["T_BENCH_CONTAINER_LOGS_PATH"] && v != composeVars["T_BENCH_CONTAINER_AGENT_LOGS_PATH"] {
			mounts = append(mounts, v)
		}
	}
	if len(mounts) > 0 {
		notes = append(notes, fmt.Sprintf("docker-compose.yaml mounts volumes at %s: not applied", strings.Join(mounts, ", ")))
	}
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
			return nil, nil, fmt.Errorf("docker-compose.yaml: the service has neither build nor image")
		}
	}
	var env *spec.Environment
	var tr *dockerfile.Translation
	if svc.Build == nil && q.Image == "" {
		env = &spec.Environment{Image: svc.Image}
	} else {
		var err error
		env, tr, err = importer.Translate(filepath.Join(ctxDir, dfName), ctxDir, q)
		if err != nil {
			return nil, nil, err
		}
		notes = append(notes, tr.Notes...)
	}
	if env.Env == nil {
		env.Env = map[string]string{}
	}
	vars, pass := importer.ComposeEnv(svc.Environment)
	if len(pass) > 0 {
		notes = append(notes, fmt.Sprintf("docker-compose.yaml passes host variable(s) %s into the container: not carried into sandboxes", strings.Join(pass, ", ")))
	}
	for k, v := range vars {
		env.Env[k] = v
	}
	if env.Sandbox == nil {
		env.Sandbox = &spec.SandboxPolicy{}
	}
	cpus, memMB, err := svc.Limits()
	if err != nil {
		return nil, nil, fmt.Errorf("docker-compose.yaml deploy.resources.limits: %w", err)
	}
	env.Sandbox.CgroupCPUs, env.Sandbox.MemoryMB = cpus, memMB
	if svc.WorkingDir != "" {
		env.Sandbox.Workdir = svc.WorkingDir
	}
	// The container's user (compose's, else the image's) runs the agent's
	// tmux session and the main process.
	env.User = svc.UserString()
	if env.User == "" && tr != nil {
		env.User = tr.User
	}
	ep, epSet, err := importer.Words(svc.Entrypoint)
	if err != nil {
		return nil, nil, fmt.Errorf("docker-compose.yaml entrypoint: %w", err)
	}
	cmd, cmdSet, err := importer.Words(svc.Command)
	if err != nil {
		return nil, nil, fmt.Errorf("docker-compose.yaml command: %w", err)
	}
	argv, known := importer.MainProcess(tr, ep, epSet, cmd, cmdSet)
	env.Service = importer.Service(argv)

	// What of the image's own config the task depends on, unread.
	unread := []string{"WORKDIR", "ENTRYPOINT", "CMD"}
	if tr != nil {
		unread = tr.BaseUnread
	}
	var keep []string
	for _, u := range unread {
		switch {
		case u == "WORKDIR" && svc.WorkingDir != "",
			u == "ENTRYPOINT" && (known || epSet),
			u == "CMD" && (known || epSet || cmdSet):
			continue
		}
		keep = append(keep, u)
	}
	if n := importer.BaseNote(env.Image, keep); n != "" {
		notes = append(notes, n)
	}
	return env, notes, nil
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

// TailBytes is how much of the end of run-tests.sh's output the checker
// prints. The sandbox keeps the head of a command's output (up to
// sandbox.DefaultOutputLimit per stream), but pytest's summary, which the
// parser reads, comes last: so the output goes to a file and only its end
// is printed, leaving room for the lines the command adds. Terminal-Bench
// itself keeps the end too: its tmux pane holds the last 50,000 lines.
const TailBytes = sandbox.DefaultOutputLimit - 64<<10

// testCommand runs run-tests.sh as the harness does, bounded by the task's
// max_test_timeout_sec, as one brace group (so a file-decoding step can be
// put before it with &&), stdout and stderr interleaved as in the pane,
// and prints the last TailBytes of that output (from a line start). It
// exits 0 whatever the tests did, since Terminal-Bench grades the output,
// not the exit status; only a missing timeout(1) or temporary file is exit
// 127 (an infrastructure error, not a score).
func testCommand(maxTestTimeoutSec float64) string {
	secs := strconv.FormatFloat(maxTestTimeoutSec, 'f', -1, 64)
	return fmt.Sprintf(`{
command -v timeout >/dev/null || { echo "evalsi: timeout(1) is not in the image; it bounds run-tests.sh by max_test_timeout_sec" >&2; exit 127; }
evalsi_out=$(mktemp) || { echo "evalsi: mktemp could not make a file for the test output" >&2; exit 127; }
timeout -k 10 %s bash /tests/run-tests.sh >"$evalsi_out" 2>&1
evalsi_rc=$?
evalsi_size=$(wc -c <"$evalsi_out")
if [ "$evalsi_size" -gt %d ]; then
  echo ">>>>> evalsi: the test output is $evalsi_size bytes; its end follows"
  tail -c %d "$evalsi_out" | { IFS= read -r _; cat; }
else
  cat "$evalsi_out"
fi
rm -f "$evalsi_out"
if [ $evalsi_rc -eq 124 ]; then echo %s; fi
exit 0
}`, secs, TailBytes, TailBytes, dockerfile.Quote(TestsTimedOut))
}
