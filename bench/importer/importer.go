// Package importer holds what the benchmark importers (terminal-bench://,
// harbor://, swebench://) share: the result of an import with the tasks it
// refused and why, URI parsing, reading a task's files, and the record
// metadata keys the oracle agent reads.
package importer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"evals.si/dataset"
	"evals.si/dockerfile"
	"evals.si/spec"
)

// Metadata keys set on imported records.
const (
	// MetaSolution holds a Solution (the oracle agent's input).
	MetaSolution = "solution"
	// MetaBenchmark names the benchmark (terminal-bench, harbor, swebench).
	MetaBenchmark = "benchmark"
)

// Solution is a task's reference solution, as the oracle agent applies it.
type Solution struct {
	// Files are written first (absolute paths; binary ones base64 at
	// PATH.evalsi-b64, decoded by Setup).
	Files map[string]string `json:"files,omitempty"`
	// Setup runs after the files are written (decoding, chmod).
	Setup string `json:"setup,omitempty"`
	// Command runs the solution with sh -c in the task's workdir.
	Command string `json:"command"`
	// Env is added to the command's environment.
	Env map[string]string `json:"env,omitempty"`
}

// Refusal is a task that does not import, and why.
type Refusal struct {
	Task   string `json:"task"`
	Reason string `json:"reason"`
}

// Result is what an import produced.
type Result struct {
	Records []spec.Record `json:"records"`
	Refused []Refusal     `json:"refused,omitempty"`
	// Notes are, by record ID, what that record honours of its task only
	// in part. They travel beside the records, never in them, so a
	// record's identity and stored spec do not depend on them.
	Notes map[string][]string `json:"notes,omitempty"`
}

// Note adds notes for the record id.
func (r *Result) Note(id string, notes ...string) {
	if len(notes) == 0 {
		return
	}
	if r.Notes == nil {
		r.Notes = map[string][]string{}
	}
	r.Notes[id] = append(r.Notes[id], notes...)
}

// Importer imports a dataset URI, keeping the refusals.
type Importer interface {
	Import(ctx context.Context, u *url.URL, baseDir string) (*Result, error)
}

// Source adapts an importer to dataset.Source: refused tasks are left out,
// unless the URI named them explicitly (?tasks= or ?instances=), which is
// an error naming each refused one, and an import that leaves nothing is an
// error listing why.
func Source(imp Importer, listKey string) dataset.Source {
	return dataset.SourceFunc(func(ctx context.Context, u *url.URL, baseDir string) ([]spec.Record, error) {
		res, err := imp.Import(ctx, u, baseDir)
		if err != nil {
			return nil, err
		}
		if len(res.Refused) > 0 && (u.Query().Get(listKey) != "" || len(res.Records) == 0) {
			var b strings.Builder
			for _, r := range res.Refused {
				fmt.Fprintf(&b, "\n  %s: %s", r.Task, r.Reason)
			}
			return nil, fmt.Errorf("%d task(s) cannot be imported:%s", len(res.Refused), b.String())
		}
		return res.Records, nil
	})
}

// Reason words a task's import error for a Refusal: a translation refusal
// as it is, anything else as an invalid task.
func Reason(err error) string {
	var r *dockerfile.RefusalError
	if errors.As(err, &r) {
		return r.Reason
	}
	return "invalid task: " + err.Error()
}

// Query is the common part of an importer URI's query.
type Query struct {
	// Names filters tasks (?tasks=a,b or ?instances=a,b).
	Names []string
	// Image replaces the Dockerfile translation (?image=REF).
	Image string
	// Network tightens the task's network (?network=deny).
	Network string
	// Values are the other parameters, for the importer to read.
	Values url.Values
}

// ParseQuery reads u's query; allowed lists the keys beyond listKey, image
// and network that the importer accepts. Unknown keys are errors.
func ParseQuery(u *url.URL, listKey string, allowed ...string) (Query, error) {
	v := u.Query()
	q := Query{Values: v}
	for k := range v {
		if k != listKey && k != "image" && k != "network" && !slices.Contains(allowed, k) {
			known := append([]string{listKey, "image", "network"}, allowed...)
			return q, fmt.Errorf("unknown query parameter %q in %s (known: %s)", k, u.Redacted(), strings.Join(known, ", "))
		}
	}
	for _, n := range strings.Split(v.Get(listKey), ",") {
		if n = strings.TrimSpace(n); n != "" {
			q.Names = append(q.Names, n)
		}
	}
	q.Image = v.Get("image")
	q.Network = v.Get("network")
	switch q.Network {
	case "", "deny":
	default:
		return q, fmt.Errorf("network=%s in %s: only network=deny (tighten the tasks' network) is accepted", q.Network, u.Redacted())
	}
	return q, nil
}

// Path is the filesystem path a URI names: scheme://rel/path is relative
// to baseDir, scheme:///abs/path is absolute.
func Path(u *url.URL, baseDir string) (string, error) {
	p := u.Host + u.Path
	if u.Opaque != "" {
		p = u.Opaque
	}
	if p == "" {
		return "", fmt.Errorf("%s names no path: use %s://DIR (relative to the spec file) or %s:///ABSOLUTE/DIR", u.Redacted(), u.Scheme, u.Scheme)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(baseDir, p)
	}
	return filepath.Clean(p), nil
}

// ReadTree reads every regular file under dir, keyed by slash path
// relative to dir.
func ReadTree(dir string) (map[string]dockerfile.File, error) {
	out := map[string]dockerfile.File{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = dockerfile.File{Data: b, Mode: fi.Mode().Perm()}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	return out, nil
}

// Rebase puts files (relative slash paths) under the absolute directory
// root.
func Rebase(files map[string]dockerfile.File, root string) map[string]dockerfile.File {
	out := make(map[string]dockerfile.File, len(files))
	for k, v := range files {
		out[path.Join(root, k)] = v
	}
	return out
}

// MustJSON encodes v for record metadata; v is always encodable.
func MustJSON(v any) spec.JSON {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("importer: encoding %T: %v", v, err))
	}
	return spec.JSON(b)
}

// Select keeps the task names in want (all when want is empty), and
// reports the names in want that do not exist.
func Select(all []string, want []string) ([]string, error) {
	if len(want) == 0 {
		return all, nil
	}
	var missing []string
	for _, w := range want {
		if !slices.Contains(all, w) {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		hint := strings.Join(all, ", ")
		if len(all) > 20 {
			hint = strings.Join(all[:20], ", ") + ", …"
		}
		return nil, fmt.Errorf("no task named %s (tasks: %s)", strings.Join(missing, ", "), hint)
	}
	return want, nil
}

// Environment is a task's translated environment, before the importer adds
// its checker and network.
func Environment(dfPath, contextDir string, q Query) (*spec.Environment, error) {
	env, _, err := Translate(dfPath, contextDir, q)
	return env, err
}

// Translate is Environment with the translation itself, for the image
// config (USER, ENTRYPOINT, CMD, HEALTHCHECK) and the notes.
func Translate(dfPath, contextDir string, q Query) (*spec.Environment, *dockerfile.Translation, error) {
	b, err := os.ReadFile(dfPath)
	if err != nil {
		return nil, nil, err
	}
	tr, err := dockerfile.Translate(b, contextDir, nil)
	if err != nil {
		return nil, nil, err
	}
	env := &spec.Environment{Image: tr.Image, Files: tr.Files, Setup: tr.Setup, Env: tr.Env}
	if q.Image != "" {
		// The named image stands for the built Dockerfile: its RUN steps
		// are taken as done. Files, ENV and WORKDIR are still applied, and
		// the fix-ups that give placed files their modes and owners, so
		// placing them again over the built image changes nothing.
		env.Image = q.Image
		env.Setup = tr.Placement
	}
	if tr.Workdir != "" {
		env.Sandbox = &spec.SandboxPolicy{Workdir: tr.Workdir}
	}
	return env, tr, nil
}

// BaseNote words what of the base image's config a task depends on but is
// not read (unread lists WORKDIR, USER, ENTRYPOINT, CMD), or "" for none.
func BaseNote(image string, unread []string) string {
	if len(unread) == 0 {
		return ""
	}
	def := map[string]string{"WORKDIR": "/ for the RUN steps before the Dockerfile's first WORKDIR", "ENTRYPOINT": "none", "CMD": "none"}
	parts := make([]string, len(unread))
	for i, u := range unread {
		parts[i] = u + " (taken as " + def[u] + ")"
	}
	return fmt.Sprintf("the config of image %s is not read when translating: its %s (its ENV, WORKDIR and USER do apply to the commands that run)", image, strings.Join(parts, ", "))
}

// SetNetwork applies the task's network mode, tightened by ?network=deny
// (which also denies setup its network).
func SetNetwork(env *spec.Environment, mode string, hosts []string, q Query) {
	if env.Sandbox == nil {
		env.Sandbox = &spec.SandboxPolicy{}
	}
	if q.Network == "deny" {
		mode, hosts = "deny", nil
	}
	env.Sandbox.Network = mode
	env.Sandbox.AllowHosts = hosts
	if q.Network != "deny" {
		// Docker builds with the network on whatever the task's network
		// when it runs: setup reaches package mirrors as the build would.
		env.SetupNetwork = "allow"
	}
}

// DataDir is the data directory a URI names with param= (relative to
// baseDir), else the variable env (read with getenv; nil reads nothing).
// what names the benchmark's directory in errors; hint says where it is.
func DataDir(v url.Values, param, env string, getenv func(string) string, baseDir, what, hint string) (string, error) {
	if v.Has(param) {
		d := v.Get(param)
		if d == "" {
			return "", fmt.Errorf("%s= is empty: give %s, relative to the spec file or absolute", param, what)
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(baseDir, d)
		}
		return filepath.Clean(d), nil
	}
	if getenv != nil {
		if d := getenv(env); d != "" {
			return filepath.Clean(d), nil
		}
	}
	return "", fmt.Errorf("%s is not named: pass %s=DIR (relative to the spec file, or absolute) or set %s; %s", what, param, env, hint)
}
