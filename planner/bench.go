package planner

import (
	"os"

	"evals.si/bench/bfcl"
	"evals.si/bench/harbor"
	"evals.si/bench/swebench"
	"evals.si/bench/taubench"
	"evals.si/bench/terminalbench"
	"evals.si/checker"
	"evals.si/dataset"
)

// Datasets is a dataset registry with the benchmark importers' URI
// schemes, for a Host (which may register more: ServeRuns, ServeTraces).
func Datasets() *dataset.Registry {
	reg := dataset.NewRegistry()
	terminalbench.Register(reg)
	harbor.Register(reg)
	swebench.Register(reg)
	// BFCL_DATA_DIR is read only when a URI has no data_dir=; a server
	// refuses such URIs before loading (server/confine.go).
	bfcl.Register(reg, os.Getenv)
	// TAU2_DATA_DIR likewise.
	taubench.Register(reg, os.Getenv)
	return reg
}

// registerBenchParsers adds the benchmark graders' checker parsers.
func registerBenchParsers(reg *checker.Registry) {
	terminalbench.RegisterParsers(reg)
	harbor.RegisterParsers(reg)
	swebench.RegisterParsers(reg)
}
