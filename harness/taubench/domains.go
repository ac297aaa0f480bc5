package taubench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"evals.si/harness/taubench/airline"
	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/retail"
	"evals.si/harness/taubench/tau2"
	"evals.si/harness/taubench/telecom"
)

// PythonClass is the harness's name in a spec, as the documentation
// writes it: harness: {external: {python: evalsi_taubench:TauBenchHarness}}.
// It runs in Go, in the worker's process; tau2 itself is not needed.
const PythonClass = "evalsi_taubench:TauBenchHarness"

// loader returns the Load of a tau2 domain the harness runs, which reads
// the domain's directory of tau2's data layout.
func loader(name string) (func(dir string) (domain.Data, error), bool) {
	switch name {
	case "airline":
		return func(dir string) (domain.Data, error) {
			d, err := airline.Load(dir)
			if err != nil {
				return nil, err // not a typed nil in the interface
			}
			return d, nil
		}, true
	case "retail":
		return retail.Load, true
	case "telecom":
		return telecom.Load, true
	}
	return nil, false
}

// DomainNames lists the supported domains.
func DomainNames() []string { return []string{"airline", "retail", "telecom"} }

// Known reports whether name is a supported domain.
func Known(name string) bool {
	_, ok := loader(name)
	return ok
}

// DomainDir finds a domain's directory under root, which may be tau2's
// data/ directory (data/tau2/domains/<domain>), its tau2/ or domains/
// directory, a directory holding <domain>/, or the domain's directory
// itself.
func DomainDir(root, name string) (string, error) {
	candidates := []string{
		filepath.Join(root, "tau2", "domains", name),
		filepath.Join(root, "domains", name),
		filepath.Join(root, name),
		root,
	}
	for _, c := range candidates {
		if hasPolicy(c) {
			return c, nil
		}
	}
	return "", fmt.Errorf("no %s domain under %s (looked for its policy in %s): point data_dir= or TAU2_DATA_DIR at tau2's data/ directory", name, root, strings.Join(candidates, ", "))
}

// hasPolicy reports whether dir looks like a tau2 domain directory.
func hasPolicy(dir string) bool {
	for _, p := range []string{"policy.md", "main_policy.md"} {
		if st, err := os.Stat(filepath.Join(dir, p)); err == nil && !st.IsDir() {
			return true
		}
	}
	return false
}

// DataRoot is tau2's data/ directory above a domain directory found by
// DomainDir, or "" (the user simulator's guidelines are read from there).
func DataRoot(domainDir string) string {
	domainsDir := filepath.Dir(domainDir)
	tau2Dir := filepath.Dir(domainsDir)
	if filepath.Base(domainsDir) == "domains" && filepath.Base(tau2Dir) == "tau2" {
		return tau2Dir
	}
	return ""
}

// Metadata is what the taubench:// importer puts in a record's metadata
// under "taubench", and all the harness needs for a trial.
type Metadata struct {
	Domain string `json:"domain"`
	// Dir is the domain's data directory on the worker.
	Dir  string    `json:"dir"`
	Task tau2.Task `json:"task"`
}

// MetadataKey is the record metadata key holding Metadata.
const MetadataKey = "taubench"

// ParseMetadata reads a record's Metadata.
func ParseMetadata(md map[string]json.RawMessage) (*Metadata, error) {
	raw, ok := md[MetadataKey]
	if !ok {
		return nil, fmt.Errorf("the record has no metadata.%s: import it with taubench://<domain> (the %s harness runs tau2 tasks only)", MetadataKey, PythonClass)
	}
	var m Metadata
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("metadata.%s: %w", MetadataKey, err)
	}
	if !Known(m.Domain) {
		return nil, fmt.Errorf("metadata.%s.domain %q: want one of %s", MetadataKey, m.Domain, strings.Join(DomainNames(), ", "))
	}
	if err := m.Task.Check(); err != nil {
		return nil, fmt.Errorf("metadata.%s.task: %w", MetadataKey, err)
	}
	return &m, nil
}

// dataCache reads each domain directory once.
type dataCache struct {
	mu sync.Mutex
	m  map[string]domain.Data
}

func (c *dataCache) get(name, dir string) (domain.Data, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := name + "\x00" + dir
	if d, ok := c.m[key]; ok {
		return d, nil
	}
	load, ok := loader(name)
	if !ok {
		return nil, fmt.Errorf("unknown tau2 domain %q", name)
	}
	d, err := load(dir)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]domain.Data{}
	}
	c.m[key] = d
	return d, nil
}
