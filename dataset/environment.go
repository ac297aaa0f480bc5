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
func Environment(base *spec.Environment, rec spec.Record) (*spec.Environment, error) {
	override, ok := rec.Metadata["environment"]
	if !ok || override.IsZero() {
		return copyEnv(base)
	}
	// Decode the override on its own first, so a misspelt or mistyped field
	// is reported as such (with a suggestion) rather than lost in the merge.
	name := fmt.Sprintf("record %q metadata.environment", rec.ID)
	var check spec.Environment
	if err := spec.Decode(name, override, &check); err != nil {
		return nil, err
	}
	var over map[string]any
	if err := decodeJSON(override, &over); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var merged map[string]any
	if base != nil {
		b, err := json.Marshal(base)
		if err != nil {
			return nil, fmt.Errorf("encoding the spec's environment: %w", err)
		}
		if err := decodeJSON(b, &merged); err != nil {
			return nil, fmt.Errorf("encoding the spec's environment: %w", err)
		}
	}
	merged = merge(merged, over)
	b, err := json.Marshal(merged)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	env := new(spec.Environment)
	if err := json.Unmarshal(b, env); err != nil {
		return nil, fmt.Errorf("%s: merging over the spec's environment: %w", name, err)
	}
	env.ApplyDefaults()
	if err := env.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
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
