package airline

import (
	"encoding/json"

	"evals.si/harness/taubench/pyvalue"
)

// tau2 calls the tools with the JSON arguments as Python values, unchecked:
// what a wrong-typed argument does is whatever Python and pydantic do with
// it. The airline tools keep their arguments as raw JSON; these helpers
// give pyvalue's view of one, and validate a dict as a model's fields.

// value is raw as json.loads gives it; an absent argument is None.
func value(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	v, err := pyvalue.Parse(raw)
	if err != nil {
		return nil // the call's arguments were JSON when they came in
	}
	return v
}

// kind is type(v).__name__ of a JSON value.
func kind(raw json.RawMessage) string { return pyvalue.Type(value(raw)) }

// pyStr is Python's str() of a JSON value.
func pyStr(raw json.RawMessage) string { return pyvalue.Str(value(raw)) }

// pyRepr is Python's repr() of a JSON value.
func pyRepr(raw json.RawMessage) string { return pyvalue.Repr(value(raw)) }

// fields is a JSON object's members as a model's constructor gets them
// (Model(**d)), with the object itself for the errors' input_value.
type fields struct {
	raw json.RawMessage
	m   map[string]json.RawMessage
}

func newFields(raw json.RawMessage) (fields, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fields{}, err
	}
	return fields{raw: raw, m: m}, nil
}

// str validates a str field; prefix is the location of the model in an
// enclosing one ("passengers.1.").
func (f fields) str(ve *pyvalue.ValidationError, prefix, name string) string {
	v, ok := f.get(ve, prefix, name)
	if !ok {
		return ""
	}
	return ve.Str(prefix+name, value(v))
}

// integer validates an int field.
func (f fields) integer(ve *pyvalue.ValidationError, prefix, name string) int {
	v, ok := f.get(ve, prefix, name)
	if !ok {
		return 0
	}
	return ve.Int(prefix+name, value(v))
}

// get is a required field's value; a missing one is an error.
func (f fields) get(ve *pyvalue.ValidationError, prefix, name string) (json.RawMessage, bool) {
	v, ok := f.m[name]
	if !ok {
		ve.Add(prefix+name, "missing", "Field required", value(f.raw))
	}
	return v, ok
}
