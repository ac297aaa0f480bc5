package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"

	"evals.si/spec"
)

// Environment returns the environment of one record: base with the
// record's metadata.environment laid over it field by field. Mappings
// merge key by key, recursively (sandbox: {memory_mb: 4096} changes only
// the memory; files: {a.py: ...} adds or replaces one file); lists and
// scalars replace; null clears a field. Defaults are then applied and the
// result validated. base is never modified; the result shares nothing with
// it. A record without metadata.environment gets a copy of base (nil stays
// nil).
//
// The spec file's author sets the weakest sandbox policy a run may have; a
// record may tighten base but never loosen it (see Looser): one that asks
// for more is refused with a *LooserError naming the record and the field.
// A nil base is no spec at all (inspecting what a dataset carries): there
// is nothing to loosen then, so runs must pass the spec's environment,
// defaults applied, never nil.
func Environment(base *spec.Environment, rec spec.Record) (*spec.Environment, error) {
	env, err := merged(base, rec)
	if err != nil {
		return nil, err
	}
	if env == base {
		return copyEnv(base)
	}
	// Before validation, so a record reaching for the host rung hears that
	// it may not, rather than how to enable it.
	if fields := Looser(base, env); base != nil && len(fields) > 0 {
		return nil, &LooserError{Record: rec.ID, Fields: fields}
	}
	if err := env.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", overrideName(rec), err)
	}
	return env, nil
}

func overrideName(rec spec.Record) string {
	return fmt.Sprintf("record %q metadata.environment", rec.ID)
}

// merged lays rec's metadata.environment over base and applies defaults,
// unvalidated; with no override it returns base itself.
func merged(base *spec.Environment, rec spec.Record) (*spec.Environment, error) {
	override, ok := rec.Metadata["environment"]
	if !ok || override.IsZero() {
		return base, nil
	}
	// Decode the override on its own first, so a misspelt or mistyped field
	// is reported as such (with a suggestion) rather than lost in the merge.
	name := overrideName(rec)
	var check spec.Environment
	if err := spec.Decode(name, override, &check); err != nil {
		return nil, err
	}
	var over map[string]any
	if err := decodeJSON(override, &over); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var m map[string]any
	if base != nil {
		b, err := json.Marshal(base)
		if err != nil {
			return nil, fmt.Errorf("encoding the spec's environment: %w", err)
		}
		if err := decodeJSON(b, &m); err != nil {
			return nil, fmt.Errorf("encoding the spec's environment: %w", err)
		}
	}
	m = merge(m, over)
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	env := new(spec.Environment)
	if err := json.Unmarshal(b, env); err != nil {
		return nil, fmt.Errorf("%s: merging over the spec's environment: %w", name, err)
	}
	env.ApplyDefaults()
	return env, nil
}

// merge lays over onto base: objects merge key by key, anything else in
// over replaces. It builds new maps and leaves both arguments untouched.
func merge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, ov := range over {
		bm, bok := out[k].(map[string]any)
		om, ook := ov.(map[string]any)
		if bok && ook {
			out[k] = merge(bm, om)
			continue
		}
		out[k] = ov
	}
	return out
}

// decodeJSON decodes keeping numbers exact.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

func copyEnv(e *spec.Environment) (*spec.Environment, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("copying the environment: %w", err)
	}
	out := new(spec.Environment)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("copying the environment: %w", err)
	}
	return out, nil
}
