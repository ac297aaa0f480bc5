package swebench

import (
	"encoding/json"
	"testing"

	"evals.si/internal/testenv/swebenchref"
)

// The differential tests run swebench's own code (swebench==5.0.2, which
// scripts/python-adapters.sh installs) and this package on the same inputs;
// any difference fails. The Python side is
// python/adapters/swebench/reference/driver.py, one process per test.

// callReference sends req to the driver and decodes its answer into resp.
func callReference(t *testing.T, req, resp any) {
	t.Helper()
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	out := swebenchref.Run(t, "reference/driver.py", in)
	if err := json.Unmarshal(out, resp); err != nil {
		t.Fatalf("reference driver answer: %v", err)
	}
}

// referenceRegistry is what the driver's "registry" op reports.
type referenceRegistry struct {
	Version       string              `json:"version"`
	Registry      []string            `json:"registry"`
	Aliases       map[string][]string `json:"aliases"`
	RepoParsers   map[string][]string `json:"repo_parsers"`
	FailOnlyRepos []string            `json:"fail_only_repos"`
}

func loadReferenceRegistry(t *testing.T) referenceRegistry {
	t.Helper()
	var r referenceRegistry
	callReference(t, map[string]string{"op": "registry"}, &r)
	if r.Version != swebenchref.Version {
		t.Fatalf("reference package is swebench %s, want %s (run scripts/python-adapters.sh)", r.Version, swebenchref.Version)
	}
	return r
}
