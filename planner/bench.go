package planner

import (
	"evals.si/bench/harbor"
	"evals.si/bench/swebench"
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
	return reg
}

// registerBenchParsers adds the benchmark graders' checker parsers.
func registerBenchParsers(reg *checker.Registry) {
	terminalbench.RegisterParsers(reg)
	harbor.RegisterParsers(reg)
	swebench.RegisterParsers(reg)
}
