package pyjson

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Dict is a string-keyed map that keeps its keys in insertion order, as a
// Python dict does: a tau2 database's dicts (users by id, a flight's dates)
// are written back in the order the data file had them. The zero Dict is
// empty and ready to use.
type Dict[V any] struct {
	keys []string
	m    map[string]V
}

// Len is the number of keys.
func (d *Dict[V]) Len() int { return len(d.keys) }

// Keys returns the keys in order (the caller must not modify it).
func (d *Dict[V]) Keys() []string { return d.keys }

// Get returns the value at k.
func (d *Dict[V]) Get(k string) (V, bool) {
	v, ok := d.m[k]
	return v, ok
}

// Has reports whether k is a key.
func (d *Dict[V]) Has(k string) bool {
	_, ok := d.m[k]
	return ok
}

// Set sets k to v; a new key goes last.
func (d *Dict[V]) Set(k string, v V) {
	if d.m == nil {
		d.m = map[string]V{}
	}
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

// Delete removes k.
func (d *Dict[V]) Delete(k string) {
	if _, ok := d.m[k]; !ok {
		return
	}
	delete(d.m, k)
	for i, x := range d.keys {
		if x == k {
			d.keys = append(d.keys[:i:i], d.keys[i+1:]...)
			break
		}
	}
}

// Values returns the values in key order.
func (d *Dict[V]) Values() []V {
	out := make([]V, len(d.keys))
	for i, k := range d.keys {
		out[i] = d.m[k]
	}
	return out
}

// Value receivers: a Dict field is written whether or not it is a pointer.
func (d Dict[V]) pyKeys() []string     { return d.keys }
func (d Dict[V]) pyValue(k string) any { return d.m[k] }

// MarshalJSON writes the keys in order.
func (d Dict[V]) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range d.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(d.m[k])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object, keeping its keys' order; a repeated key
// keeps its first place and its last value, as json.loads does.
func (d *Dict[V]) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		*d = Dict[V]{}
		return nil
	}
	if delim, ok := tok.(json.Delim); !ok || delim != '{' {
		return fmt.Errorf("want a JSON object, got %v", tok)
	}
	*d = Dict[V]{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		k, _ := tok.(string)
		var v V
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("%q: %w", k, err)
		}
		d.Set(k, v)
	}
	_, err = dec.Token()
	return err
}

// ToolResult is tau2's Environment.to_json_str: what a tool's return
// value becomes in the tool message. A string is itself; anything else is
// json.dumps of it after models (Go structs) are dumped as they are and,
// outside models, numbers and booleans are turned into their str() (so a
// tool returning True says "True", and {"n": 1} becomes {"n": "1"}).
func ToolResult(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return Dumps(process(v))
}

func process(v any) any {
	switch x := v.(type) {
	case nil, string:
		return x
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int:
		return fmt.Sprint(x)
	case int64:
		return fmt.Sprint(x)
	case float64:
		return FloatRepr(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = process(e)
		}
		return out
	case *Dict[any]:
		var out Dict[any]
		for _, k := range x.Keys() {
			e, _ := x.Get(k)
			out.Set(k, process(e))
		}
		return &out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = process(e)
		}
		return out
	}
	// A model (struct, or a list of them): dumped as model_dump does.
	return v
}
