// Package planner turns a validated spec into a runnable engine plan: the
// connectors, evaluators, agent, tools and checker parsers a run's trials
// need. Embedded mode, the server (at submit) and a worker (for each run it
// leases) call the same planner, each with the Host it provides.
//
// Loading the dataset (Records) is apart from building the plan (Plan): a
// submitter loads and checks the records once; a worker builds the plan
// and gets each record with the trial it leases.
package planner

import (
	"evals.si/egress"
	"log/slog"
	"os"

	"evals.si/dataset"
	"evals.si/environment"
	"evals.si/sandbox"
)

// Host is what the hosting gives the planner.
type Host struct {
	// Envs prepares and caches the trials' sandboxed environments.
	Envs *environment.Manager
	// Rungs are the sandbox rungs this host can run (an agent run is
	// refused when none of its ladder works here).
	Rungs []sandbox.Rung
	// Datasets loads records (nil: Datasets()).
	Datasets *dataset.Registry
	// ProxyDir holds the egress proxies' unix sockets.
	ProxyDir string
	// Egress runs the trials' egress proxies where the sandboxes are (nil:
	// in this process, under ProxyDir).
	Egress egress.Host
	Logger *slog.Logger
	// Getenv reads the worker variables a spec names (API keys, env_from;
	// nil: os.Getenv).
	Getenv func(string) string
}

func (h *Host) logger() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}

func (h *Host) getenv() func(string) string {
	if h.Getenv != nil {
		return h.Getenv
	}
	return os.Getenv
}

func (h *Host) datasets() *dataset.Registry {
	if h.Datasets != nil {
		return h.Datasets
	}
	return Datasets()
}

// SpecError is a problem with the spec found while building the plan (an
// unknown parser, a missing key): a usage error, exit 2.
type SpecError struct{ Err error }

func (e SpecError) Error() string { return e.Err.Error() }
func (e SpecError) Unwrap() error { return e.Err }

// where positions an error at a field of the spec file (a *spec.File):
// the helpers get the section they work on and this, not the whole spec.
type where interface {
	Errorf(field, format string, args ...any) error
}
