package importer

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"
	"github.com/goccy/go-yaml"

	"evals.si/dockerfile"
	"evals.si/spec"
)

// ComposeService is one service of a task's docker-compose.yaml: the keys
// the importers apply, and the names of the others.
type ComposeService struct {
	Build any    `yaml:"build"`
	Image string `yaml:"image"`
	// Command and Entrypoint are a list, or a string split as compose
	// splits it (shell words, no shell); nil when unset.
	Command     any    `yaml:"command"`
	Entrypoint  any    `yaml:"entrypoint"`
	Environment any    `yaml:"environment"`
	WorkingDir  string `yaml:"working_dir"`
	// User is a name or uid, optionally :group (a number in YAML too).
	User        any            `yaml:"user"`
	NetworkMode string         `yaml:"network_mode"`
	Healthcheck map[string]any `yaml:"healthcheck"`
	// Volumes are short-form "SRC:DST[:MODE]" strings or long-form maps.
	Volumes []any `yaml:"volumes"`
	Deploy  struct {
		Resources struct {
			Limits map[string]any `yaml:"limits"`
		} `yaml:"resources"`
	} `yaml:"deploy"`
	// Keys are all the service's keys, for the importer to report those it
	// does not apply.
	Keys []string `yaml:"-"`
}

// Compose is a docker-compose.yaml's services.
type Compose struct {
	Services map[string]ComposeService
	// Unset are the variables the file reads that vars did not give
	// (compose would read them from the host), sorted.
	Unset []string
}

// ParseCompose reads a compose file, interpolating ${VAR}, ${VAR:-default}
// and ${VAR-default} with vars (unknown ones are empty, as compose makes
// them) and $$ as $.
func ParseCompose(b []byte, vars map[string]string) (*Compose, error) {
	unset := map[string]bool{}
	text := interpolate(string(b), func(k string) (string, bool) {
		v, ok := vars[k]
		if !ok {
			unset[k] = true
		}
		return v, ok
	})
	var raw struct {
		Services map[string]map[string]any `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		return nil, err
	}
	var typed struct {
		Services map[string]ComposeService `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(text), &typed); err != nil {
		return nil, err
	}
	c := &Compose{Services: map[string]ComposeService{}}
	for k := range unset {
		c.Unset = append(c.Unset, k)
	}
	sort.Strings(c.Unset)
	for name, s := range typed.Services {
		for k := range raw.Services[name] {
			s.Keys = append(s.Keys, k)
		}
		sort.Strings(s.Keys)
		c.Services[name] = s
	}
	return c, nil
}

// Names lists the services, sorted.
func (c *Compose) Names() []string {
	out := make([]string, 0, len(c.Services))
	for n := range c.Services {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Unapplied lists the service's keys not in applied.
func (s ComposeService) Unapplied(applied ...string) []string {
	var out []string
	for _, k := range s.Keys {
		if !slices.Contains(applied, k) {
			out = append(out, k)
		}
	}
	return out
}

// Limits are deploy.resources.limits: cpus and memory in MiB (0 when
// unset). Other limits (pids) are errors, so that nothing is dropped
// silently.
func (s ComposeService) Limits() (cpus float64, memMB int, err error) {
	for k, v := range s.Deploy.Resources.Limits {
		switch k {
		case "cpus":
			if cpus, err = strconv.ParseFloat(strings.TrimSpace(fmt.Sprint(v)), 64); err != nil || cpus < 0 {
				return 0, 0, fmt.Errorf("cpus %v is not a number of CPUs", v)
			}
		case "memory":
			b, err := units.RAMInBytes(fmt.Sprint(v))
			if err != nil {
				return 0, 0, fmt.Errorf("memory %v: %w", v, err)
			}
			memMB = int((b + 1<<20 - 1) >> 20)
		default:
			return 0, 0, fmt.Errorf("limit %s is not applied here (only cpus and memory)", k)
		}
	}
	return cpus, memMB, nil
}

// VolumeTargets are the container paths the service's volumes mount.
func (s ComposeService) VolumeTargets() []string {
	var out []string
	for _, v := range s.Volumes {
		switch x := v.(type) {
		case string:
			parts := strings.Split(x, ":")
			if len(parts) == 1 {
				out = append(out, parts[0])
			} else {
				out = append(out, parts[1])
			}
		case map[string]any:
			out = append(out, fmt.Sprint(x["target"]))
		}
	}
	return out
}

// UserString is the service's user, or "".
func (s ComposeService) UserString() string {
	if s.User == nil {
		return ""
	}
	return fmt.Sprint(s.User)
}

// interpolate is compose's variable substitution, reading variables with
// lookup.
func interpolate(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; {
		case next == '$':
			b.WriteByte('$')
			i++
		case next == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			expr := s[i+2 : i+end]
			name, def, v := expr, "", ""
			if j := strings.IndexAny(expr, ":-?"); j >= 0 {
				name = expr[:j]
				if rest, ok := strings.CutPrefix(expr[j:], ":-"); ok {
					def = rest
					if val, _ := lookup(name); val != "" {
						v = val
					} else {
						v = def
					}
				} else if rest, ok := strings.CutPrefix(expr[j:], "-"); ok {
					if val, set := lookup(name); set {
						v = val
					} else {
						v = rest
					}
				} else {
					v, _ = lookup(name) // ${VAR:?err} and ${VAR?err}: compose fails when unset; empty here
				}
			} else {
				v, _ = lookup(name)
			}
			b.WriteString(v)
			i += end
		case isNameByte(next, true):
			j := i + 1
			for j < len(s) && isNameByte(s[j], j == i+1) {
				j++
			}
			v, _ := lookup(s[i+1 : j])
			b.WriteString(v)
			i = j - 1
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func isNameByte(c byte, first bool) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

// Words reads a compose command or entrypoint: a list as it is, a string
// split into shell words; set is false when v is nil (the key is unset).
func Words(v any) (words []string, set bool, err error) {
	switch x := v.(type) {
	case nil:
		return nil, false, nil
	case string:
		w, err := splitWords(x)
		return w, true, err
	case []any:
		out := make([]string, len(x))
		for i, it := range x {
			out[i] = fmt.Sprint(it)
		}
		return out, true, nil
	}
	return nil, true, fmt.Errorf("want a string or a list, got %T", v)
}

// splitWords splits s into shell words with quotes and backslashes, no
// expansion (what compose does with a string command).
func splitWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == '\'':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' quote in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			// Inside double quotes a backslash escapes only " \ $ and `.
			closed := false
			for i++; i < len(s); i++ {
				if s[i] == '"' {
					closed = true
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if !closed {
				return nil, fmt.Errorf("unterminated \" quote in %q", s)
			}
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// ComposeEnv reads a service's environment (a list of K=V or a mapping).
// Entries without a value pass the host's variable in, which a record
// never carries: they are listed in passthrough.
func ComposeEnv(v any) (env map[string]string, passthrough []string) {
	env = map[string]string{}
	switch e := v.(type) {
	case []any:
		for _, it := range e {
			s := fmt.Sprint(it)
			if k, val, ok := strings.Cut(s, "="); ok {
				env[k] = val
			} else {
				passthrough = append(passthrough, s)
			}
		}
	case map[string]any:
		for k, it := range e {
			if it == nil {
				passthrough = append(passthrough, k)
				continue
			}
			env[k] = fmt.Sprint(it)
		}
	}
	sort.Strings(passthrough)
	return env, passthrough
}

// ComposeHealthcheck reads a service's healthcheck (nil when absent or
// disabled): test as a list ([CMD, …], [CMD-SHELL, cmd], [NONE]) or a
// string (CMD-SHELL), durations in Go's form as compose writes them.
func ComposeHealthcheck(m map[string]any) (*spec.Healthcheck, error) {
	if m == nil {
		return nil, nil
	}
	if d, _ := m["disable"].(bool); d {
		return nil, nil
	}
	var test []string
	switch t := m["test"].(type) {
	case string:
		test = []string{"CMD-SHELL", t}
	case []any:
		for _, it := range t {
			test = append(test, fmt.Sprint(it))
		}
	case nil:
		return nil, fmt.Errorf("healthcheck without a test")
	}
	h := &spec.Healthcheck{}
	switch {
	case len(test) == 0 || test[0] == "NONE":
		return nil, nil
	case test[0] == "CMD":
		h.Command = test[1:]
	case test[0] == "CMD-SHELL" && len(test) == 2:
		h.Command = []string{"/bin/sh", "-c", test[1]}
	default:
		return nil, fmt.Errorf("healthcheck test %q: want [CMD, …], [CMD-SHELL, cmd] or a string", test)
	}
	for key, dst := range map[string]*spec.Duration{"interval": &h.Interval, "timeout": &h.Timeout, "start_period": &h.StartPeriod, "start_interval": &h.StartInterval} {
		if v, ok := m[key]; ok {
			d, err := time.ParseDuration(fmt.Sprint(v))
			if err != nil {
				return nil, fmt.Errorf("healthcheck %s: %w", key, err)
			}
			*dst = spec.Duration(d)
		}
	}
	if v, ok := m["retries"]; ok {
		n, err := toInt(v)
		if err != nil {
			return nil, fmt.Errorf("healthcheck retries: %w", err)
		}
		h.Retries = n
	}
	return h, nil
}

func toInt(v any) (int, error) {
	switch n := v.(type) {
	case int:
		return n, nil
	case int64:
		return int(n), nil
	case uint64:
		return int(n), nil
	case float64:
		return int(n), nil
	}
	return 0, fmt.Errorf("want a number, got %v", v)
}

// MainProcess is the argv Docker starts a container with: the entrypoint
// (compose's, else the image's) followed by the command (compose's; else
// the image's CMD, which a compose entrypoint resets). known is false
// when the image's part comes from a base image, which is not read.
func MainProcess(tr *dockerfile.Translation, entrypoint []string, epSet bool, command []string, cmdSet bool) (argv []string, known bool) {
	known = true
	ep := entrypoint
	if !epSet {
		if tr == nil || !tr.EntrypointSet {
			known = false
		} else {
			ep = tr.Entrypoint
		}
	}
	cmd := command
	if !cmdSet {
		switch {
		case epSet:
			cmd = nil
		case tr != nil && (tr.CmdSet || tr.EntrypointSet):
			cmd = tr.Cmd
		default:
			known = false
		}
	}
	return append(slices.Clone(ep), cmd...), known
}

// keepalives are the commands harnesses give a container to keep it up.
var keepalives = [][]string{
	{"sh", "-c", "sleep infinity"},
	{"bash", "-c", "sleep infinity"},
	{"/bin/sh", "-c", "sleep infinity"},
	{"sleep", "infinity"},
	{"tail", "-f", "/dev/null"},
}

// Service is the main process as an environment service: nil when it is
// only a harness's keepalive (or nothing), which the sandbox needs not run.
func Service(argv []string) *spec.Service {
	if len(argv) == 0 {
		return nil
	}
	for _, k := range keepalives {
		if slices.Equal(argv, k) {
			return nil
		}
	}
	return &spec.Service{Command: argv}
}

// SameUser reports whether two user specs name the same user, root
// spelled any way.
func SameUser(a, b string) bool {
	root := func(u string) bool {
		switch u {
		case "", "root", "0", "root:root", "0:0", "root:0", "0:root":
			return true
		}
		return false
	}
	if root(a) || root(b) {
		return root(a) && root(b)
	}
	return a == b
}

// OrRoot is u, or "root" when empty: an explicit user for a phase that
// must not follow environment.user.
func OrRoot(u string) string {
	if u == "" {
		return "root"
	}
	return u
}
