// Package airline is tau2's airline domain (domains/airline): flights,
// users and reservations, and the agent's fourteen tools over them, written
// to answer and change the database exactly as tau2's AirlineTools do.
// The domain has no user tools.
package airline

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"evals.si/harness/taubench/domain"
)

// toolsJSON is tau2's description of the tools, recorded by
// scripts/tau2-reference/generate.py.
//
//go:embed tools.json
var toolsJSON []byte

// Data is the airline domain's data: the database as read (never
// changed: environments get copies), and the policy.
type Data struct {
	db      *FlightDB
	policy  string
	schemas []domain.Schema
}

var _ domain.Data = (*Data)(nil)

// Load reads dir/db.json and dir/policy.md, dir being the airline
// directory of tau2's data layout (data/tau2/domains/airline).
func Load(dir string) (domain.Data, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "db.json"))
	if err != nil {
		return nil, fmt.Errorf("airline: reading db.json in %s: %w; set data_dir= or TAU2_DATA_DIR to tau2's data directory", dir, err)
	}
	db, err := decodeDB(raw)
	if err != nil {
		return nil, fmt.Errorf("airline: reading db.json in %s: %w", dir, err)
	}
	policy, err := os.ReadFile(filepath.Join(dir, "policy.md"))
	if err != nil {
		return nil, fmt.Errorf("airline: reading policy.md in %s: %w; set data_dir= or TAU2_DATA_DIR to tau2's data directory", dir, err)
	}
	schemas, err := domain.ParseTools(toolsJSON, "agent")
	if err != nil {
		return nil, fmt.Errorf("airline: %w", err)
	}
	return &Data{db: db, policy: string(policy), schemas: schemas}, nil
}

func decodeDB(raw []byte) (*FlightDB, error) {
	var db FlightDB
	if err := domain.DecodeStrict(bytes.TrimSpace(raw), &db); err != nil {
		return nil, err
	}
	if db.Flights == nil || db.Users == nil || db.Reservations == nil {
		return nil, fmt.Errorf("the database needs flights, users and reservations")
	}
	return &db, nil
}

// Policy is the agent's policy, policy.md as it is.
func (d *Data) Policy() string { return d.policy }

// NewEnv returns an environment over a fresh copy of the database.
func (d *Data) NewEnv() (domain.Env, error) {
	return &Env{tools: &Tools{db: d.db.clone(), schemas: d.schemas}}, nil
}

// Env is one airline environment: the agent's tools, no user side.
type Env struct {
	tools *Tools
}

var _ domain.Env = (*Env)(nil)

// Agent is the agent's toolkit.
func (e *Env) Agent() domain.Toolkit { return e.tools }

// User is nil: airline has no user tools.
func (e *Env) User() domain.Toolkit { return nil }

// Sync does nothing: airline's environment has no state to sync.
func (e *Env) Sync() error { return nil }

// UpdateDB is update_db on the agent's database.
func (t *Tools) UpdateDB(patch json.RawMessage) error {
	return domain.Merge(t.db, patch)
}
