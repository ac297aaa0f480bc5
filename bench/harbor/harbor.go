// Package harbor imports Harbor tasks (harbor://DIR?tasks=a,b) and grades
// them as Harbor's verifier does.
//
// DIR is a task folder or a folder of task folders (each with task.toml).
// A task becomes a record whose input is instruction.md and whose
// metadata.environment is environment/Dockerfile translated (or
// [environment].docker_image), with the task compose file's main service,
// [environment].workdir, env, resources and healthcheck applied. The
// agent runs as [agent].user and the verifier as [verifier].user, each
// falling back to the container's user; the image's ENTRYPOINT, given
// Harbor's `sh -c "sleep infinity"`, is the environment's service. Each
// phase gets its network ([environment]'s, or its own override). The
// checker copies tests/ to /tests after the agent and runs
// `bash /tests/test.sh 2>&1 | tee /logs/verifier/test-stdout.txt`; the
// script's exit code is not used: the reward file decides (reward.json
// first, then reward.txt, as upstream Harbor since 2026-05), and no reward
// file is an infrastructure error, not a 0.
//
// Refused with the reason: multi-step tasks ([[steps]]), verifiers in a
// separate environment, [[verifier.collect]] hooks, compose files with
// services beside main, Windows tasks, GPUs and TPUs, MCP servers, skills
// directories, and allowed_hosts the egress allowlist cannot express.
package harbor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"evals.si/bench/importer"
	"evals.si/dataset"
	"evals.si/dockerfile"
	"evals.si/spec"
)

// Scheme is the dataset URI scheme.
const Scheme = "harbor"

// Register makes reg serve harbor:// URIs.
func Register(reg *dataset.Registry) {
	reg.Register(Scheme, importer.Source(Importer{}, "tasks"))
}

// Importer imports Harbor task folders.
type Importer struct{}

// TaskConfig is the part of task.toml the importer reads.
type TaskConfig struct {
	Task *struct {
		Name string `toml:"name"`
	} `toml:"task"`
	Metadata map[string]any `toml:"metadata"`
	Verifier struct {
		TimeoutSec      *float64          `toml:"timeout_sec"`
		Env             map[string]string `toml:"env"`
		EnvironmentMode string            `toml:"environment_mode"`
		Environment     map[string]any    `toml:"environment"`
		Collect         []map[string]any  `toml:"collect"`
		// User is a name or uid (a TOML string or integer).
		User any `toml:"user"`
		PhaseNetwork
	} `toml:"verifier"`
	Agent struct {
		TimeoutSec *float64 `toml:"timeout_sec"`
		User       any      `toml:"user"`
		PhaseNetwork
	} `toml:"agent"`
	Environment struct {
		DockerImage   string            `toml:"docker_image"`
		OS            string            `toml:"os"`
		CPUs          *float64          `toml:"cpus"`
		MemoryMB      int               `toml:"memory_mb"`
		StorageMB     int               `toml:"storage_mb"`
		Memory        string            `toml:"memory"`  // deprecated: "2G", "512M"
		Storage       string            `toml:"storage"` // deprecated
		GPUs          *int              `toml:"gpus"`
		TPU           map[string]any    `toml:"tpu"`
		MCPServers    []map[string]any  `toml:"mcp_servers"`
		SkillsDir     string            `toml:"skills_dir"`
		Env           map[string]string `toml:"env"`
		Workdir       string            `toml:"workdir"`
		Healthcheck   *Healthcheck      `toml:"healthcheck"`
		NetworkMode   *string           `toml:"network_mode"`
		AllowedHosts  []string          `toml:"allowed_hosts"`
		AllowInternet *bool             `toml:"allow_internet"`
	} `toml:"environment"`
	Solution struct {
		Env map[string]string `toml:"env"`
	} `toml:"solution"`
	Steps []map[string]any `toml:"steps"`
}

// Healthcheck is [environment.healthcheck] (HealthcheckConfig).
type Healthcheck struct {
	Command          string   `toml:"command"`
	IntervalSec      *float64 `toml:"interval_sec"`
	TimeoutSec       *float64 `toml:"timeout_sec"`
	StartPeriodSec   *float64 `toml:"start_period_sec"`
	StartIntervalSec *float64 `toml:"start_interval_sec"`
	Retries          *int     `toml:"retries"`
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
	dirs, err := findTasks(root)
	if err != nil {
		return nil, err
	}
	all := make([]string, 0, len(dirs))
	for n := range dirs {
		all = append(all, n)
	}
	sort.Strings(all)
	names, err := importer.Select(all, q.Names)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", root, err)
	}
	res := &importer.Result{}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rec, notes, err := importTask(dirs[name], name, q)
		if err != nil {
			res.Refused = append(res.Refused, importer.Refusal{Task: name, Reason: importer.Reason(err)})
			continue
		}
		res.Records = append(res.Records, rec)
		res.Note(rec.ID, notes...)
	}
	return res, nil
}

// findTasks maps task names (folder base names) to folders: root itself
// when it holds task.toml, else its sub-folders that do.
func findTasks(root string) (map[string]string, error) {
	if _, err := os.Stat(filepath.Join(root, "task.toml")); err == nil {
		return map[string]string{filepath.Base(root): root}, nil
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("reading Harbor tasks: %w", err)
	}
	out := map[string]string{}
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if _, err := os.Stat(filepath.Join(p, "task.toml")); e.IsDir() && err == nil {
			out[e.Name()] = p
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no Harbor task (a folder with task.toml) in %s", root)
	}
	return out, nil
}

// importTask imports one task folder: the record, and what of the task
// it honours only in part.
func importTask(dir, name string, q importer.Query) (spec.Record, []string, error) {
	var cfg TaskConfig
	if _, err := toml.DecodeFile(filepath.Join(dir, "task.toml"), &cfg); err != nil {
		return spec.Record{}, nil, fmt.Errorf("task.toml: %w", err)
	}
	if err := refusals(&cfg); err != nil {
		return spec.Record{}, nil, err
	}
	instr, err := os.ReadFile(filepath.Join(dir, "instruction.md"))
	if err != nil {
		return spec.Record{}, nil, fmt.Errorf("reading instruction.md: %w", err)
	}
	var notes []string
	envDir := filepath.Join(dir, "environment")
	envVars, err := expandAll(cfg.Environment.Env)
	if err != nil {
		return spec.Record{}, nil, err
	}
	main, unset, err := mainService(envDir, composeVars(&cfg, envVars))
	if err != nil {
		return spec.Record{}, nil, err
	}
	if len(unset) > 0 {
		notes = append(notes, fmt.Sprintf("environment/docker-compose.yaml reads host variable(s) %s, which are not passed in: they are unset here (defaults apply)", strings.Join(unset, ", ")))
	}
	if main == nil {
		main = &importer.ComposeService{}
	} else if un := main.Unapplied(appliedComposeKeys...); len(un) > 0 {
		notes = append(notes, fmt.Sprintf("environment/docker-compose.yaml: main's %s not applied", strings.Join(un, ", ")))
	}

	env, tr, err := environment(envDir, &cfg, q)
	if err != nil {
		return spec.Record{}, nil, err
	}
	if tr != nil {
		notes = append(notes, tr.Notes...)
	}
	if env.Env == nil {
		env.Env = map[string]string{}
	}
	composeEnv, pass := importer.ComposeEnv(main.Environment)
	if len(pass) > 0 {
		notes = append(notes, fmt.Sprintf("environment/docker-compose.yaml passes host variable(s) %s into main: not carried into sandboxes", strings.Join(pass, ", ")))
	}
	for k, v := range composeEnv {
		env.Env[k] = v
	}
	for k, v := range envVars {
		env.Env[k] = v
	}
	verifierEnv, err := expandAll(cfg.Verifier.Env)
	if err != nil {
		return spec.Record{}, nil, err
	}
	solutionEnv, err := expandAll(cfg.Solution.Env)
	if err != nil {
		return spec.Record{}, nil, err
	}
	if env.Sandbox == nil {
		env.Sandbox = &spec.SandboxPolicy{}
	}
	// The container's own workdir (where the main process starts) is the
	// image's WORKDIR or compose's working_dir; [environment].workdir is
	// where Harbor's exec runs the agent's and verifier's commands.
	if main.WorkingDir != "" {
		env.Sandbox.Workdir = main.WorkingDir
	}
	containerWD := env.Sandbox.Workdir
	if cfg.Environment.Workdir != "" {
		env.Sandbox.Workdir = cfg.Environment.Workdir
	}
	if env.Sandbox.MemoryMB, err = sizeMB(cfg.Environment.MemoryMB, cfg.Environment.Memory); err != nil {
		return spec.Record{}, nil, fmt.Errorf("[environment] memory: %w", err)
	}
	if env.Sandbox.DiskMB, err = sizeMB(cfg.Environment.StorageMB, cfg.Environment.Storage); err != nil {
		return spec.Record{}, nil, fmt.Errorf("[environment] storage: %w", err)
	}
	if cfg.Environment.CPUs != nil {
		env.Sandbox.CgroupCPUs = *cfg.Environment.CPUs
	}

	// Users: the container's is compose's user, else the Dockerfile's
	// USER; the agent runs as [agent].user and the verifier as
	// [verifier].user, each falling back to the container's.
	imageUser := main.UserString()
	if imageUser == "" && tr != nil {
		imageUser = tr.User
	}
	env.User = userString(cfg.Agent.User, imageUser)
	verifierUser := userString(cfg.Verifier.User, imageUser)

	// The main process, as Docker starts it: the ENTRYPOINT followed by
	// the command Harbor's compose file gives main (sleep infinity), or
	// the task compose's own.
	ep, epSet, err := importer.Words(main.Entrypoint)
	if err != nil {
		return spec.Record{}, nil, fmt.Errorf("environment/docker-compose.yaml main entrypoint: %w", err)
	}
	cmd, cmdSet, err := importer.Words(main.Command)
	if err != nil {
		return spec.Record{}, nil, fmt.Errorf("environment/docker-compose.yaml main command: %w", err)
	}
	if !cmdSet {
		cmd, cmdSet = harborKeepalive, true
	}
	argv, known := importer.MainProcess(tr, ep, epSet, cmd, cmdSet)
	if env.Service = importer.Service(argv); env.Service != nil {
		if !importer.SameUser(imageUser, env.User) {
			env.Service.User = importer.OrRoot(imageUser)
		}
		if wd := orSlash(containerWD); wd != orSlash(env.Sandbox.Workdir) {
			env.Service.Workdir = wd
		}
	}
	hc, hnotes, err := healthcheck(&cfg, tr, main)
	if err != nil {
		return spec.Record{}, nil, err
	}
	if hc != nil {
		// Harbor runs it before it switches to the agent's user, so as
		// the container's user.
		if !importer.SameUser(imageUser, env.User) {
			hc.User = importer.OrRoot(imageUser)
		}
		env.Healthcheck = hc
		notes = append(notes, hnotes...)
	}
	unread := []string{"WORKDIR", "ENTRYPOINT"}
	if tr != nil {
		unread = tr.BaseUnread
	}
	notes = append(notes, baseNote(env.Image, unread, known, env.Sandbox.Workdir != ""))

	// Network, per phase: the agent's is the sandbox's; the verifier's is
	// the checker's when it differs. ?network=deny tightens both.
	base, err := baseline(cfg.Environment.NetworkMode, cfg.Environment.AllowedHosts, cfg.Environment.AllowInternet)
	if err != nil {
		return spec.Record{}, nil, err
	}
	agentNet, err := phase("agent", cfg.Agent.PhaseNetwork, base)
	if err != nil {
		return spec.Record{}, nil, err
	}
	verifierNet, err := phase("verifier", cfg.Verifier.PhaseNetwork, base)
	if err != nil {
		return spec.Record{}, nil, err
	}
	mode, hosts, note, err := agentNet.sandbox()
	if err != nil {
		return spec.Record{}, nil, err
	}
	vmode, vhosts, vnote, err := verifierNet.sandbox()
	if err != nil {
		return spec.Record{}, nil, err
	}
	if note == "" {
		note = vnote
	}
	if note != "" && q.Network != "deny" {
		notes = append(notes, note)
	}
	importer.SetNetwork(env, mode, hosts, q)
	// Harbor mounts these for the agent and the verifier, writable by
	// every user (ensure_dirs: chmod 777), so a non-root agent or
	// verifier writes its logs and rewards.
	env.Setup = append(env.Setup, spec.SetupStep{Run: "mkdir -p /logs/agent /logs/verifier /logs/artifacts /tests && chmod 777 /logs/agent /logs/verifier /logs/artifacts"})

	chk, err := verifier(dir, &cfg, verifierEnv)
	if err != nil {
		return spec.Record{}, nil, err
	}
	if !importer.SameUser(verifierUser, env.User) {
		chk.User = importer.OrRoot(verifierUser)
	}
	if q.Network != "deny" && (vmode != env.Sandbox.Network || !slices.Equal(vhosts, env.Sandbox.AllowHosts)) {
		chk.Network, chk.AllowHosts = vmode, vhosts
	}
	env.Checker = chk

	meta := map[string]spec.JSON{
		"environment":          importer.MustJSON(env),
		importer.MetaBenchmark: importer.MustJSON("harbor"),
	}
	if len(cfg.Metadata) > 0 {
		meta["task_metadata"] = importer.MustJSON(cfg.Metadata)
	}
	if cfg.Agent.TimeoutSec != nil {
		meta["agent_timeout_sec"] = importer.MustJSON(*cfg.Agent.TimeoutSec)
	}
	if sd := filepath.Join(dir, "solution"); fileExists(filepath.Join(sd, "solve.sh")) {
		sf, err := importer.ReadTree(sd)
		if err != nil {
			return spec.Record{}, nil, err
		}
		files, fix := dockerfile.EncodeFiles(importer.Rebase(sf, "/solution"))
		meta[importer.MetaSolution] = importer.MustJSON(importer.Solution{Files: files, Setup: fix, Command: "bash /solution/solve.sh", Env: solutionEnv})
	}
	return spec.Record{ID: name, Input: spec.Input{Text: string(instr)}, Metadata: meta}, compact(notes), nil
}

// harborKeepalive is the command Harbor's compose files give main.
var harborKeepalive = []string{"sh", "-c", "sleep infinity"}

// appliedComposeKeys are the keys of main in a task's compose file that
// the import applies (Harbor's own mounts are not in that file: a volume
// there is the task's, and not applied).
var appliedComposeKeys = []string{"command", "entrypoint", "environment", "working_dir", "user", "healthcheck"}

// refusals are the tasks that cannot run here at all, with the reason.
func refusals(cfg *TaskConfig) error {
	refuse := func(format string, args ...any) error {
		return &dockerfile.RefusalError{Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case len(cfg.Steps) > 0:
		return refuse("multi-step task (%d steps): each step has its own instruction and verifier, which one record cannot carry", len(cfg.Steps))
	case cfg.Verifier.EnvironmentMode == "separate" || len(cfg.Verifier.Environment) > 0:
		return refuse("the verifier runs in a separate environment; only verifiers sharing the agent's environment are supported")
	case len(cfg.Verifier.Collect) > 0:
		return refuse("[[verifier.collect]] hooks run in compose services before the verifier; they are not run here")
	case cfg.Environment.OS != "" && !strings.EqualFold(cfg.Environment.OS, "linux"):
		return refuse("environment.os = %s: only Linux tasks run here", cfg.Environment.OS)
	case cfg.Environment.GPUs != nil && *cfg.Environment.GPUs > 0:
		return refuse("environment.gpus = %d: no sandbox rung here offers a GPU", *cfg.Environment.GPUs)
	case cfg.Environment.TPU != nil:
		return refuse("environment.tpu: no sandbox rung here offers a TPU")
	case len(cfg.Environment.MCPServers) > 0:
		return refuse("environment.mcp_servers: the task's MCP servers are not given to agents here")
	case cfg.Environment.SkillsDir != "":
		return refuse("environment.skills_dir: skills are not copied into agents' configuration here")
	}
	return nil
}

// mainService reads environment/docker-compose.yaml, if any. Harbor lays
// it over its own compose file: a service main overrides the agent's
// container, and any other is a sidecar, which is refused.
func mainService(envDir string, vars map[string]string) (*importer.ComposeService, []string, error) {
	b, err := os.ReadFile(filepath.Join(envDir, "docker-compose.yaml"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	c, err := importer.ParseCompose(b, vars)
	if err != nil {
		return nil, nil, fmt.Errorf("environment/docker-compose.yaml: %w", err)
	}
	var others []string
	for _, n := range c.Names() {
		if n != "main" {
			others = append(others, n)
		}
	}
	if len(others) > 0 {
		return nil, nil, &dockerfile.RefusalError{Reason: fmt.Sprintf("environment/docker-compose.yaml adds service(s) %s beside main: tasks with several services are not supported", strings.Join(others, ", "))}
	}
	if m, ok := c.Services["main"]; ok {
		if m.Build != nil || m.Image != "" {
			return nil, nil, &dockerfile.RefusalError{Reason: "environment/docker-compose.yaml gives main its own build or image: only environment/Dockerfile and [environment].docker_image are read"}
		}
		return &m, c.Unset, nil
	}
	return nil, c.Unset, nil
}

// composeVars are the variables Harbor's docker compose sees: its own
// (ComposeInfraEnvVars; the image and context names mean nothing here)
// and the task's [environment].env.
func composeVars(cfg *TaskConfig, env map[string]string) map[string]string {
	vars := map[string]string{"MAIN_IMAGE_NAME": "", "CONTEXT_DIR": "", "PREBUILT_IMAGE_NAME": cfg.Environment.DockerImage}
	if cfg.Environment.CPUs != nil {
		vars["CPUS"] = fmt.Sprint(*cfg.Environment.CPUs)
	}
	if cfg.Environment.MemoryMB > 0 {
		vars["MEMORY"] = fmt.Sprintf("%dM", cfg.Environment.MemoryMB)
	}
	for k, v := range env {
		vars[k] = v
	}
	return vars
}

// environment is the translated Dockerfile, or [environment].docker_image
// (tr is then nil: an image whose config is not read).
func environment(envDir string, cfg *TaskConfig, q importer.Query) (*spec.Environment, *dockerfile.Translation, error) {
	df := filepath.Join(envDir, "Dockerfile")
	switch {
	case q.Image != "":
		if fileExists(df) {
			return importer.Translate(df, envDir, q)
		}
		return &spec.Environment{Image: q.Image}, nil, nil
	case cfg.Environment.DockerImage != "":
		return &spec.Environment{Image: cfg.Environment.DockerImage}, nil, nil
	}
	env, tr, err := importer.Translate(df, envDir, q)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("no environment/Dockerfile and no [environment].docker_image")
	}
	return env, tr, err
}

// healthcheck is [environment.healthcheck], run as Harbor's exec runs a
// command in main (bash -c) with Harbor's defaults; without one, the
// image's own HEALTHCHECK (compose's, else the Dockerfile's), which
// Harbor's `docker compose up --wait` waits on.
func healthcheck(cfg *TaskConfig, tr *dockerfile.Translation, main *importer.ComposeService) (*spec.Healthcheck, []string, error) {
	image, err := importer.ComposeHealthcheck(main.Healthcheck)
	if err != nil {
		return nil, nil, fmt.Errorf("environment/docker-compose.yaml main: %w", err)
	}
	if main.Healthcheck == nil && tr != nil && tr.Healthcheck != nil {
		hc := *tr.Healthcheck
		image = &hc
	}
	h := cfg.Environment.Healthcheck
	if h == nil {
		return image, nil, nil
	}
	if strings.TrimSpace(h.Command) == "" {
		return nil, nil, fmt.Errorf("[environment.healthcheck] has no command")
	}
	sec := func(p *float64, def float64) spec.Duration {
		v := def
		if p != nil {
			v = *p
		}
		return spec.Duration(time.Duration(v * float64(time.Second)))
	}
	hc := &spec.Healthcheck{
		Command:       []string{"bash", "-c", h.Command},
		Interval:      sec(h.IntervalSec, 5),
		Timeout:       sec(h.TimeoutSec, 30),
		StartPeriod:   sec(h.StartPeriodSec, 0),
		StartInterval: sec(h.StartIntervalSec, 5),
		Retries:       3,
	}
	if h.Retries != nil {
		hc.Retries = *h.Retries
	}
	var notes []string
	if image != nil {
		notes = append(notes, "the image's HEALTHCHECK, which docker compose up --wait waits on before [environment.healthcheck], is not waited on: only [environment.healthcheck] is")
	}
	return hc, notes, nil
}

// verifier is the checker Harbor's verifier amounts to.
func verifier(dir string, cfg *TaskConfig, verifierEnv map[string]string) (*spec.Checker, error) {
	tf, err := importer.ReadTree(filepath.Join(dir, "tests"))
	if err != nil {
		return nil, err
	}
	if _, ok := tf["test.sh"]; !ok {
		return nil, fmt.Errorf("tests/test.sh is missing")
	}
	files, fix := dockerfile.EncodeFiles(importer.Rebase(tf, "/tests"))
	var script strings.Builder
	for _, k := range sortedKeys(verifierEnv) {
		fmt.Fprintf(&script, "export %s=%s\n", k, dockerfile.Quote(verifierEnv[k]))
	}
	script.WriteString("bash /tests/test.sh 2>&1 | tee /logs/verifier/test-stdout.txt\n")
	timeout := 600.0
	if cfg.Verifier.TimeoutSec != nil {
		timeout = *cfg.Verifier.TimeoutSec
	}
	c := &spec.Checker{
		Files:   files,
		Command: []string{"bash", "-c", script.String()},
		Parser:  ParserReward,
		Timeout: spec.Duration(time.Duration(timeout * float64(time.Second))),
	}
	// As root, before the verifier: whatever the agent left in
	// /logs/verifier (a reward of its own, a directory where the reward
	// file goes) must not count, so the directory starts empty, as
	// Harbor's mount does.
	c.Setup = []string{"rm -rf /logs/verifier && mkdir -p /logs/verifier && chmod 777 /logs/verifier"}
	if fix != "" {
		// Decoding and modes as root, as Harbor's upload of tests/ is the
		// harness's, whatever user the verifier runs as.
		c.Setup = append(c.Setup, fix)
	}
	return c, nil
}

// baseNote is what of the image's own config the task depends on and
// translating cannot apply: WORKDIR when the task sets none, ENTRYPOINT
// when the main process is not known. CMD never matters: Harbor's compose
// file replaces it. (Its USER, ENV and WORKDIR apply when the environment
// is prepared.)
func baseNote(image string, unread []string, mainKnown, hasWorkdir bool) string {
	var keep []string
	for _, u := range unread {
		switch {
		case u == "WORKDIR" && hasWorkdir, u == "ENTRYPOINT" && mainKnown, u == "CMD":
			continue
		}
		keep = append(keep, u)
	}
	return importer.BaseNote(image, keep)
}

// userString is a phase's user: its own (a TOML string or integer), else
// the container's.
func userString(v any, fallback string) string {
	switch u := v.(type) {
	case nil:
		return fallback
	case string:
		return u
	default:
		return fmt.Sprint(u)
	}
}

// sizeMB is memory_mb or storage_mb, else the deprecated size string
// ("2G", "512M", "1024K") as Harbor's _parse_size_to_mb reads it.
func sizeMB(mb int, size string) (int, error) {
	if mb > 0 || size == "" {
		return mb, nil
	}
	s := strings.ToUpper(strings.TrimSpace(size))
	mult := map[byte]float64{'G': 1024, 'M': 1, 'K': 1.0 / 1024}
	if s == "" || mult[s[len(s)-1]] == 0 {
		return 0, fmt.Errorf("%q: want a size like 2G or 512M", size)
	}
	f, err := strconv.ParseFloat(s[:len(s)-1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q: want a size like 2G or 512M", size)
	}
	return int(f * mult[s[len(s)-1]]), nil
}

func orSlash(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// compact drops empty notes.
func compact(notes []string) []string {
	return slices.DeleteFunc(notes, func(s string) bool { return s == "" })
}

// expand resolves ${VAR:-default} to its default. Harbor would read VAR
// from the host; host variables are never carried into a record (it is
// stored, and secrets must not be), so a value naming a host variable
// without a default is refused.
func expand(s string) (string, error) {
	var missing []string
	out := os.Expand(s, func(k string) string {
		name, def, hasDef := strings.Cut(k, ":-")
		if hasDef {
			return def
		}
		missing = append(missing, name)
		return ""
	})
	if len(missing) > 0 {
		return "", &dockerfile.RefusalError{Reason: fmt.Sprintf("the task reads host variable(s) %s, which are not passed into sandboxes", strings.Join(missing, ", "))}
	}
	return out, nil
}

// expandAll expands every value of m.
func expandAll(m map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(m))
	for k, v := range m {
		e, err := expand(v)
		if err != nil {
			return nil, err
		}
		out[k] = e
	}
	return out, nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
