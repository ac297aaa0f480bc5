// Package harbor imports Harbor tasks (harbor://DIR?tasks=a,b) and grades
// them as Harbor's verifier does.
//
// DIR is a task folder or a folder of task folders (each with task.toml).
// A task becomes a record whose input is instruction.md and whose
// metadata.environment is environment/Dockerfile translated (or
// [environment].docker_image), with [environment].workdir, env and network
// applied. The checker copies tests/ to /tests after the agent and runs
// `bash /tests/test.sh 2>&1 | tee /logs/verifier/test-stdout.txt`; the
// script's exit code is not used: the reward file decides (reward.json
// first, then reward.txt, as upstream Harbor since 2026-05), and no reward
// file is an infrastructure error, not a 0.
//
// Refused with the reason: multi-step tasks ([[steps]]), verifiers in a
// separate environment, compose files with several services, and Windows
// tasks.
package harbor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/goccy/go-yaml"

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
	} `toml:"verifier"`
	Agent struct {
		TimeoutSec *float64 `toml:"timeout_sec"`
	} `toml:"agent"`
	Environment struct {
		DockerImage   string            `toml:"docker_image"`
		OS            string            `toml:"os"`
		MemoryMB      int               `toml:"memory_mb"`
		Env           map[string]string `toml:"env"`
		Workdir       string            `toml:"workdir"`
		NetworkMode   string            `toml:"network_mode"`
		AllowedHosts  []string          `toml:"allowed_hosts"`
		AllowInternet *bool             `toml:"allow_internet"`
	} `toml:"environment"`
	Solution struct {
		Env map[string]string `toml:"env"`
	} `toml:"solution"`
	Steps []map[string]any `toml:"steps"`
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
		rec, err := importTask(dirs[name], name, q)
		if err != nil {
			res.Refused = append(res.Refused, importer.Refusal{Task: name, Reason: importer.Reason(err)})
			continue
		}
		res.Records = append(res.Records, rec)
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

func importTask(dir, name string, q importer.Query) (spec.Record, error) {
	var cfg TaskConfig
	if _, err := toml.DecodeFile(filepath.Join(dir, "task.toml"), &cfg); err != nil {
		return spec.Record{}, fmt.Errorf("task.toml: %w", err)
	}
	switch {
	case len(cfg.Steps) > 0:
		return spec.Record{}, &dockerfile.RefusalError{Reason: fmt.Sprintf("multi-step task (%d steps): each step has its own instruction and verifier, which one record cannot carry", len(cfg.Steps))}
	case cfg.Verifier.EnvironmentMode == "separate" || len(cfg.Verifier.Environment) > 0:
		return spec.Record{}, &dockerfile.RefusalError{Reason: "the verifier runs in a separate environment; only verifiers sharing the agent's environment are supported"}
	case cfg.Environment.OS != "" && cfg.Environment.OS != "linux":
		return spec.Record{}, &dockerfile.RefusalError{Reason: fmt.Sprintf("environment.os = %s: only Linux tasks run here", cfg.Environment.OS)}
	}
	instr, err := os.ReadFile(filepath.Join(dir, "instruction.md"))
	if err != nil {
		return spec.Record{}, fmt.Errorf("reading instruction.md: %w", err)
	}
	envDir := filepath.Join(dir, "environment")
	if cb, err := os.ReadFile(filepath.Join(envDir, "docker-compose.yaml")); err == nil {
		var c struct {
			Services map[string]any `yaml:"services"`
		}
		if err := yaml.Unmarshal(cb, &c); err != nil {
			return spec.Record{}, fmt.Errorf("environment/docker-compose.yaml: %w", err)
		}
		if len(c.Services) > 1 {
			return spec.Record{}, &dockerfile.RefusalError{Reason: fmt.Sprintf("environment/docker-compose.yaml has %d services: tasks with several services are not supported", len(c.Services))}
		}
	}

	var env *spec.Environment
	switch {
	case q.Image != "":
		if _, err := os.Stat(filepath.Join(envDir, "Dockerfile")); err == nil {
			env, err = importer.Environment(filepath.Join(envDir, "Dockerfile"), envDir, q)
			if err != nil {
				return spec.Record{}, err
			}
		} else {
			env = &spec.Environment{Image: q.Image}
		}
	case cfg.Environment.DockerImage != "":
		env = &spec.Environment{Image: cfg.Environment.DockerImage}
	default:
		env, err = importer.Environment(filepath.Join(envDir, "Dockerfile"), envDir, q)
		if errors.Is(err, fs.ErrNotExist) {
			return spec.Record{}, fmt.Errorf("no environment/Dockerfile and no [environment].docker_image")
		}
		if err != nil {
			return spec.Record{}, err
		}
	}
	if env.Env == nil {
		env.Env = map[string]string{}
	}
	envVars, err := expandAll(cfg.Environment.Env)
	if err != nil {
		return spec.Record{}, err
	}
	for k, v := range envVars {
		env.Env[k] = v
	}
	verifierEnv, err := expandAll(cfg.Verifier.Env)
	if err != nil {
		return spec.Record{}, err
	}
	solutionEnv, err := expandAll(cfg.Solution.Env)
	if err != nil {
		return spec.Record{}, err
	}
	if cfg.Environment.Workdir != "" {
		if env.Sandbox == nil {
			env.Sandbox = &spec.SandboxPolicy{}
		}
		env.Sandbox.Workdir = cfg.Environment.Workdir
	}
	if cfg.Environment.MemoryMB > 0 {
		if env.Sandbox == nil {
			env.Sandbox = &spec.SandboxPolicy{}
		}
		env.Sandbox.MemoryMB = cfg.Environment.MemoryMB
	}
	mode, hosts := "allow", []string(nil)
	switch {
	case cfg.Environment.NetworkMode == "no-network":
		mode = "deny"
	case cfg.Environment.NetworkMode == "allowlist":
		mode, hosts = "allowlist", allowHosts(cfg.Environment.AllowedHosts)
	case cfg.Environment.NetworkMode == "" && cfg.Environment.AllowInternet != nil && !*cfg.Environment.AllowInternet:
		mode = "deny"
	}
	importer.SetNetwork(env, mode, hosts, q)
	// Harbor mounts these for the agent and the verifier.
	env.Setup = append(env.Setup, spec.SetupStep{Run: "mkdir -p /logs/agent /logs/verifier /logs/artifacts /tests"})

	tf, err := importer.ReadTree(filepath.Join(dir, "tests"))
	if err != nil {
		return spec.Record{}, err
	}
	if _, ok := tf["test.sh"]; !ok {
		return spec.Record{}, fmt.Errorf("tests/test.sh is missing")
	}
	files, fix := dockerfile.EncodeFiles(importer.Rebase(tf, "/tests"))
	var script strings.Builder
	// A reward left from before the verifier ran (by the agent) must not
	// count: the verifier's run alone writes it.
	script.WriteString("mkdir -p /logs/verifier && rm -f /logs/verifier/reward.txt /logs/verifier/reward.json")
	if fix != "" {
		script.WriteString(" && " + fix)
	}
	script.WriteString("\n")
	for _, k := range sortedKeys(verifierEnv) {
		fmt.Fprintf(&script, "export %s=%s\n", k, dockerfile.Quote(verifierEnv[k]))
	}
	script.WriteString("bash /tests/test.sh 2>&1 | tee /logs/verifier/test-stdout.txt\n")
	timeout := 600.0
	if cfg.Verifier.TimeoutSec != nil {
		timeout = *cfg.Verifier.TimeoutSec
	}
	env.Checker = &spec.Checker{
		Files:   files,
		Command: []string{"bash", "-c", script.String()},
		Parser:  ParserReward,
		Timeout: spec.Duration(time.Duration(timeout * float64(time.Second))),
	}

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
			return spec.Record{}, err
		}
		files, fix := dockerfile.EncodeFiles(importer.Rebase(sf, "/solution"))
		meta[importer.MetaSolution] = importer.MustJSON(importer.Solution{Files: files, Setup: fix, Command: "bash /solution/solve.sh", Env: solutionEnv})
	}
	return spec.Record{ID: name, Input: spec.Input{Text: string(instr)}, Metadata: meta}, nil
}

// allowHosts turns Harbor's allowed_hosts (host names) into host:port
// entries for both web ports.
func allowHosts(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		if strings.Contains(h, ":") {
			out = append(out, h)
			continue
		}
		out = append(out, h+":443", h+":80")
	}
	return out
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
