// Package taubench imports tau2-bench tasks (taubench://<domain>) for the
// τ-bench harness (harness/taubench): each task becomes a record carrying
// the task and where its domain's data lives. Tasks whose grade needs an
// LLM judging natural-language assertions are refused, and counted by
// `evalsi datasets inspect`.
package taubench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"evals.si/bench/importer"
	"evals.si/dataset"
	"evals.si/harness/taubench"
	"evals.si/harness/taubench/tau2"
	"evals.si/spec"
)

// Scheme is the dataset URI scheme.
const Scheme = "taubench"

// Query parameters.
const (
	DataDirParam  = "data_dir"
	TaskFileParam = "task_file"
	TasksParam    = "tasks"
)

// DataDirEnv names tau2's data directory when the URI has no data_dir=.
const DataDirEnv = "TAU2_DATA_DIR"

// MetaCategory is the metadata key the run summary groups scores by: the
// domain.
const MetaCategory = "category"

// Register makes reg serve taubench:// URIs; getenv reads TAU2_DATA_DIR.
func Register(reg *dataset.Registry, getenv func(string) string) {
	reg.Register(Scheme, importer.Source(Importer{Getenv: getenv}, TasksParam))
}

// Importer imports tau2 domains.
type Importer struct {
	// Getenv reads TAU2_DATA_DIR when the URI has no data_dir= (nil: the
	// variable is not read).
	Getenv func(string) string
}

// Import imports the tasks u names.
func (im Importer) Import(ctx context.Context, u *url.URL, baseDir string) (*importer.Result, error) {
	for k := range u.Query() {
		switch k {
		case TasksParam, DataDirParam, TaskFileParam:
		case "image", "network":
			return nil, fmt.Errorf("%s= does not apply to τ-bench, whose tasks run without a sandbox; leave it out", k)
		default:
			return nil, fmt.Errorf("unknown query parameter %q in %s (known: %s, %s, %s)", k, u.Redacted(), TasksParam, DataDirParam, TaskFileParam)
		}
	}
	q, err := importer.ParseQuery(u, TasksParam, DataDirParam, TaskFileParam)
	if err != nil {
		return nil, err
	}
	name, err := domainOf(u)
	if err != nil {
		return nil, err
	}
	root, err := im.dataDir(q.Values, baseDir)
	if err != nil {
		return nil, err
	}
	dir, err := taubench.DomainDir(root, name)
	if err != nil {
		return nil, err
	}
	path, err := taskFile(dir, q.Values.Get(TaskFileParam))
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the %s tasks: %w", name, err)
	}
	tasks, err := tau2.ParseTasks(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tasks, err = selectTasks(tasks, q.Names, path)
	if err != nil {
		return nil, err
	}
	res := &importer.Result{}
	for _, t := range tasks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if why := refusal(t); why != "" {
			res.Refused = append(res.Refused, importer.Refusal{Task: t.ID, Reason: why})
			continue
		}
		md := taubench.Metadata{Domain: name, Dir: dir, Task: t}
		res.Records = append(res.Records, spec.Record{
			ID:    t.ID,
			Input: spec.Input{Text: fmt.Sprintf("τ-bench %s task %s:\n%s", name, t.ID, t.UserScenario.String())},
			Metadata: map[string]spec.JSON{
				importer.MetaBenchmark: importer.MustJSON(Scheme),
				MetaCategory:           importer.MustJSON(name),
				taubench.MetadataKey:   importer.MustJSON(md),
			},
		})
	}
	return res, nil
}

// refusal says why a task cannot run here ("" when it can).
func refusal(t tau2.Task) string {
	if why := t.NeedsJudge(); why != "" {
		return why + "; natural-language assertions are not supported"
	}
	if t.InitialState != nil && len(t.InitialState.MessageHistory) > 0 {
		return "it starts from a message history, which the harness does not continue"
	}
	return ""
}

// domainOf is the domain a URI names: taubench://DOMAIN.
func domainOf(u *url.URL) (string, error) {
	d := u.Host + u.Path
	if u.Opaque != "" {
		d = u.Opaque
	}
	d = strings.Trim(d, "/")
	if d == "" {
		return "", fmt.Errorf("the URI names no domain: use taubench://DOMAIN?data_dir=DIR, DOMAIN one of %s", strings.Join(taubench.DomainNames(), ", "))
	}
	if !taubench.Known(d) {
		return "", fmt.Errorf("no τ-bench domain %q (supported: %s)", d, strings.Join(taubench.DomainNames(), ", "))
	}
	return d, nil
}

// dataDir is the directory data_dir= names (relative to baseDir), or
// TAU2_DATA_DIR.
func (im Importer) dataDir(v url.Values, baseDir string) (string, error) {
	return importer.DataDir(v, DataDirParam, DataDirEnv, im.Getenv, baseDir, "tau2's data directory",
		"it is the data/ directory of a tau2-bench checkout (data/tau2/domains/<domain>/ holds each domain's database, policy and tasks)")
}

// taskFile is the domain's tasks file: task_file= (relative to the domain
// directory), else tasks.json, else the one tasks*.json there.
func taskFile(dir, named string) (string, error) {
	if named != "" {
		if !filepath.IsAbs(named) {
			named = filepath.Join(dir, named)
		}
		return named, nil
	}
	p := filepath.Join(dir, "tasks.json")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "tasks*.json"))
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		return "", fmt.Errorf("no tasks file in %s (want tasks.json, or name one with %s=)", dir, TaskFileParam)
	}
	for i := range matches {
		matches[i] = filepath.Base(matches[i])
	}
	return "", fmt.Errorf("%s has several task files (%s) and no tasks.json: choose one with %s=NAME", dir, strings.Join(matches, ", "), TaskFileParam)
}

// selectTasks keeps the named tasks, in the order named; an unknown name
// is an error.
func selectTasks(tasks []tau2.Task, names []string, path string) ([]tau2.Task, error) {
	if len(names) == 0 {
		return tasks, nil
	}
	byID := map[string]tau2.Task{}
	var ids []string
	for _, t := range tasks {
		byID[t.ID] = t
		ids = append(ids, t.ID)
	}
	var out []tau2.Task
	for _, n := range names {
		t, ok := byID[n]
		if !ok {
			if len(ids) > 8 {
				ids = append(ids[:8:8], "…")
			}
			return nil, fmt.Errorf("%s has no task %q (tasks: %s)", path, n, strings.Join(ids, ", "))
		}
		if !slices.ContainsFunc(out, func(x tau2.Task) bool { return x.ID == n }) {
			out = append(out, t)
		}
	}
	return out, nil
}
