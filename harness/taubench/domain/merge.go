package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"evals.si/harness/taubench/pyjson"
)

// Merge is tau2's update_pydantic_model_with_dict, which update_db uses:
// the model's dump is updated with patch recursively (a nested object
// merges into the object there; anything else replaces the value) and
// validated again into db, a pointer to the model. Unknown fields are
// errors, as tau2's models forbid extras. Keys keep their order, new ones
// last.
func Merge(db any, patch json.RawMessage) error {
	cur, err := json.Marshal(db)
	if err != nil {
		return fmt.Errorf("updating the database: %w", err)
	}
	base, err := decodeOrdered(cur)
	if err != nil {
		return fmt.Errorf("updating the database: %w", err)
	}
	upd, err := decodeOrdered(patch)
	if err != nil {
		return fmt.Errorf("updating the database: the update is not JSON: %w", err)
	}
	bd, ok1 := base.(*pyjson.Dict[any])
	ud, ok2 := upd.(*pyjson.Dict[any])
	if !ok1 || !ok2 {
		return fmt.Errorf("updating the database: the update is not a JSON object")
	}
	mergeInto(bd, ud)
	merged, err := json.Marshal(bd)
	if err != nil {
		return fmt.Errorf("updating the database: %w", err)
	}
	fresh := reflect.New(reflect.TypeOf(db).Elem())
	if err := DecodeStrict(merged, fresh.Interface()); err != nil {
		return fmt.Errorf("updating the database: %w", err)
	}
	reflect.ValueOf(db).Elem().Set(fresh.Elem())
	return nil
}

func mergeInto(dst, src *pyjson.Dict[any]) {
	for _, k := range src.Keys() {
		sv, _ := src.Get(k)
		if dv, ok := dst.Get(k); ok {
			dd, ok1 := dv.(*pyjson.Dict[any])
			sd, ok2 := sv.(*pyjson.Dict[any])
			if ok1 && ok2 {
				mergeInto(dd, sd)
				continue
			}
		}
		dst.Set(k, sv)
	}
}

// DecodeStrict decodes a JSON document into v, refusing fields v's type
// does not have (tau2's databases are BaseModelNoExtra).
func DecodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// decodeOrdered decodes JSON keeping object key order: objects become
// *pyjson.Dict[any], numbers json.Number.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return readValue(dec)
}

func readValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := &pyjson.Dict[any]{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := readValue(dec)
				if err != nil {
					return nil, err
				}
				d.Set(kt.(string), v)
			}
			_, err := dec.Token()
			return d, err
		case '[':
			out := []any{}
			for dec.More() {
				v, err := readValue(dec)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}
