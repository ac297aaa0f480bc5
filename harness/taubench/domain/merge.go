package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"evals.si/harness/taubench/pyjson"
	"evals.si/harness/taubench/pyvalue"
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
	base, err := pyvalue.Ordered(cur)
	if err != nil {
		return fmt.Errorf("updating the database: %w", err)
	}
	upd, err := pyvalue.Ordered(patch)
	if err != nil {
		return fmt.Errorf("updating the database: the update is %w", err)
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
