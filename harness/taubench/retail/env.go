// Package retail is tau2-bench's retail domain in Go: the RetailDB model
// and the RetailTools the agent uses on it (look up users, orders and
// products; cancel or modify pending orders; return or exchange
// delivered ones; change a user's address), behaving as tau2's Python
// does down to the text of each result and error and every database
// write, so that the database hashes grading compares are tau2's.
package retail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"evals.si/harness/taubench/domain"
)

// Data is the retail domain's data: the database as db.json has it and
// the agent policy.
type Data struct {
	db      *RetailDB // never handed out: environments get copies
	policy  string
	schemas []domain.Schema
}

var _ domain.Data = (*Data)(nil)

// Load reads the retail domain from dir, laid out as tau2's
// data/tau2/domains/retail: db.json and policy.md.
func Load(dir string) (domain.Data, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("retail: reading %s in %s: %w; set data_dir= or TAU2_DATA_DIR to tau2's data directory", name, dir, err)
		}
		return b, nil
	}
	raw, err := read("db.json")
	if err != nil {
		return nil, err
	}
	db, err := decodeDB(raw)
	if err != nil {
		return nil, fmt.Errorf("retail: %s: %w", filepath.Join(dir, "db.json"), err)
	}
	policy, err := read("policy.md")
	if err != nil {
		return nil, err
	}
	schemas, err := domain.ParseTools(toolsJSON, "agent")
	if err != nil {
		return nil, fmt.Errorf("retail: %w", err)
	}
	return &Data{db: db, policy: string(policy), schemas: schemas}, nil
}

// Policy is policy.md as tau2 reads it.
func (d *Data) Policy() string { return d.policy }

// NewEnv returns an environment over a fresh copy of the database.
func (d *Data) NewEnv() (domain.Env, error) {
	return &Env{tools: &Tools{db: d.db.clone(), schemas: d.schemas}}, nil
}

// Env is a retail environment: the agent's tools; no user tools.
type Env struct {
	tools *Tools
}

var _ domain.Env = (*Env)(nil)

// Agent is the agent's toolkit.
func (e *Env) Agent() domain.Toolkit { return e.tools }

// User is nil: the retail user has no tools.
func (e *Env) User() domain.Toolkit { return nil }

// Sync does nothing: retail has no state to keep in step.
func (e *Env) Sync() error { return nil }

// checkDB checks what decoding alone does not: the fields pydantic
// requires that a JSON null or a missing key leaves nil, and values it
// would refuse.
func checkDB(db *RetailDB) error {
	if db.Products == nil || db.Users == nil || db.Orders == nil {
		return errors.New("products, users and orders are required")
	}
	for _, id := range db.Products.Keys() {
		p, _ := db.Products.Get(id)
		if p == nil || p.Variants == nil {
			return fmt.Errorf("product %s: missing or null", id)
		}
		for _, vid := range p.Variants.Keys() {
			if v, _ := p.Variants.Get(vid); v == nil || v.Options == nil {
				return fmt.Errorf("product %s: variant %s: missing or null", id, vid)
			}
		}
	}
	for _, id := range db.Users.Keys() {
		if u, _ := db.Users.Get(id); u == nil {
			return fmt.Errorf("user %s is null", id)
		}
	}
	for _, id := range db.Orders.Keys() {
		o, _ := db.Orders.Get(id)
		if o == nil {
			return fmt.Errorf("order %s is null", id)
		}
		for i, it := range o.Items {
			if it == nil || it.Options == nil {
				return fmt.Errorf("order %s: item %d: missing or null", id, i)
			}
		}
		switch o.ExchangePriceDifference.(type) {
		case nil, float64:
		default:
			return fmt.Errorf("order %s: exchange_price_difference is not a number", id)
		}
	}
	return nil
}
