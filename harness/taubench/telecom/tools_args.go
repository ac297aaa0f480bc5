package telecom

import (
	"encoding/json"
	"fmt"
	"math/big"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pyjson"
	"evals.si/harness/taubench/pyvalue"
)

// tau2's tools take whatever JSON the model sends: an id that is not a
// string is simply not equal to any id ("Customer with ID 42 not found"),
// and the texts show the value as Python's str() does. argValue carries an
// argument as the Python value json.loads gives, so the Go tools compare
// and print it alike.

type argKind int

const (
	kindNone argKind = iota
	kindBool
	kindInt
	kindFloat
	kindStr
	kindList
	kindDict
)

// typeName is Python's name of the type, for TypeError and
// AttributeError texts.
func (k argKind) typeName() string {
	return [...]string{"NoneType", "bool", "int", "float", "str", "list", "dict"}[k]
}

type argValue struct {
	kind argKind
	s    string  // the string, for kindStr
	num  float64 // the number as a float (a bool is 0 or 1), for kindBool, kindInt, kindFloat
	text string  // str() of the value
}

// strArg is the Python str s.
func strArg(s string) argValue { return argValue{kind: kindStr, s: s, text: s} }

// is reports whether the value equals the string s (Python's ==).
func (v argValue) is(s string) bool { return v.kind == kindStr && v.s == s }

// in reports whether the value is in list (Python's in).
func (v argValue) in(list []string) bool {
	for _, x := range list {
		if v.is(x) {
			return true
		}
	}
	return false
}

// String is str() of the value, as an f-string shows it.
func (v argValue) String() string { return v.text }

// numeric reports whether the value takes part in arithmetic as a number
// (bool is an int in Python).
func (v argValue) numeric() bool {
	return v.kind == kindBool || v.kind == kindInt || v.kind == kindFloat
}

// truthy is Python's bool() of the value.
func (v argValue) truthy() bool {
	switch v.kind {
	case kindNone:
		return false
	case kindStr:
		return v.s != ""
	case kindList:
		return v.text != "[]"
	case kindDict:
		return v.text != "{}"
	}
	return v.num != 0
}

// argOf is argument name as a Python value; an absent one is None.
func argOf(a domain.Args, name string) (argValue, error) {
	raw, ok := a[name]
	if !ok {
		return argValue{kind: kindNone, text: "None"}, nil
	}
	v, err := parseArg(raw)
	if err != nil {
		return argValue{}, fmt.Errorf("argument %s: %s: %w", name, raw, err)
	}
	return v, nil
}

// parseArg reads a JSON value as json.loads would into Python.
func parseArg(raw json.RawMessage) (argValue, error) {
	x, err := pyvalue.Parse(raw)
	if err != nil {
		return argValue{}, err
	}
	v := argValue{text: pyvalue.Str(x)}
	switch x := x.(type) {
	case nil:
		v.kind = kindNone
	case bool:
		v.kind = kindBool
		if x {
			v.num = 1
		}
	case *big.Int:
		v.kind = kindInt
		v.num, _ = new(big.Float).SetInt(x).Float64()
	case float64:
		v.kind, v.num = kindFloat, x
	case string:
		v.kind, v.s = kindStr, x
	case []any:
		v.kind = kindList
	case *pyjson.Dict[any]:
		v.kind = kindDict
	}
	return v, nil
}

// noAttributeError is Python's AttributeError text for calling a str method
// (lower, startswith) on a value that is not a str.
func noAttributeError(v argValue, attr string) error {
	return fmt.Errorf("'%s' object has no attribute '%s'", v.kind.typeName(), attr)
}
