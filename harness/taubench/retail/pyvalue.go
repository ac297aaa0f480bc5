package retail

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pycalc"
	"evals.si/harness/taubench/pyjson"
)

// tau2 passes a tool call's JSON arguments to the Python method unchecked,
// so an argument of the wrong type meets whatever Python does with it:
// a number where an id is wanted is just not found, a list is unhashable,
// a string where a list is wanted is iterated by character. The helpers
// here model the JSON values as json.loads gives them to reproduce that.

// pyValue is an argument as json.loads makes it: string, *big.Int (int),
// float64, bool, nil (None), []any (list) or *pyjson.Dict[any] (dict).
type pyValue = any

// arg decodes argument name. Bind has already refused a call missing a
// required argument, and no retail tool has an optional one.
func arg(a domain.Args, name string) (pyValue, error) {
	raw, ok := a[name]
	if !ok {
		return nil, nil
	}
	v, err := parseValue(raw)
	if err != nil {
		return nil, fmt.Errorf("argument %s: %w", name, err)
	}
	return v, nil
}

func parseValue(raw []byte) (pyValue, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readValue(dec)
	if err != nil {
		return nil, fmt.Errorf("invalid JSON %s: %w", raw, err)
	}
	return v, nil
}

func readValue(dec *json.Decoder) (pyValue, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
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
		d := &pyjson.Dict[any]{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := readValue(dec)
			if err != nil {
				return nil, err
			}
			d.Set(k.(string), v)
		}
		_, err := dec.Token()
		return d, err
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			n, ok := new(big.Int).SetString(s, 10)
			if !ok {
				return nil, fmt.Errorf("bad integer %s", s)
			}
			return n, nil
		}
		// json.loads turns an out-of-range literal into ±inf too.
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !math.IsInf(f, 0) {
			return nil, err
		}
		return f, nil
	default: // string, bool, nil
		return t, nil
	}
}

// pyType is type(v).__name__.
func pyType(v pyValue) string {
	switch v.(type) {
	case string:
		return "str"
	case *big.Int:
		return "int"
	case float64:
		return "float"
	case bool:
		return "bool"
	case nil:
		return "NoneType"
	case []any:
		return "list"
	}
	return "dict"
}

// pyStr is str(v), as an f-string writes it.
func pyStr(v pyValue) string {
	if s, ok := v.(string); ok {
		return s
	}
	return pyRepr(v)
}

// pyRepr is repr(v).
func pyRepr(v pyValue) string {
	switch x := v.(type) {
	case string:
		return strRepr(x)
	case *big.Int:
		return x.String()
	case float64:
		return pycalc.FloatStr(x)
	case bool:
		if x {
			return "True"
		}
		return "False"
	case nil:
		return "None"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyRepr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *pyjson.Dict[any]:
		parts := make([]string, 0, x.Len())
		for _, k := range x.Keys() {
			e, _ := x.Get(k)
			parts = append(parts, strRepr(k)+": "+pyRepr(e))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

// strRepr is repr(str): single quotes unless the text has a single quote
// and no double one.
func strRepr(s string) string {
	q := byte('\'')
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// dictKey is how `v in d` sees v for a dict keyed by strings: the key to
// look up, or ok=false when v is hashable but no string (never found). A
// list or dict is unhashable: Python raises TypeError.
func dictKey(v pyValue) (key string, ok bool, err error) {
	switch x := v.(type) {
	case string:
		return x, true, nil
	case []any, *pyjson.Dict[any]:
		return "", false, fmt.Errorf("unhashable type: '%s'", pyType(v))
	}
	return "", false, nil
}

// iterList iterates v as `for x in v` does, for a list argument: a
// list gives its elements, a string its characters. Other values are not
// iterable (a dict, which would give its keys, is refused plainly: no
// model sends one).
func iterList(name string, v pyValue) ([]pyValue, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case string:
		out := make([]pyValue, 0, len(x))
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case *pyjson.Dict[any]:
		return nil, fmt.Errorf("argument %s: a list of item ids is wanted, not a JSON object", name)
	}
	return nil, fmt.Errorf("'%s' object is not iterable", pyType(v))
}

// pyLen is len(v) for a list argument.
func pyLen(v pyValue) (int, error) {
	switch x := v.(type) {
	case []any:
		return len(x), nil
	case string:
		return len([]rune(x)), nil
	case *pyjson.Dict[any]:
		return x.Len(), nil
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", pyType(v))
}

// countStr counts the elements of list equal to s (only strings equal a
// string).
func countStr(list []pyValue, s string) int {
	n := 0
	for _, e := range list {
		if x, ok := e.(string); ok && x == s {
			n++
		}
	}
	return n
}

// strictStr is a str field of a pydantic model built from v: only a
// string validates. The error is one line of pydantic's ValidationError.
func strictStr(field string, v pyValue) (string, *fieldError) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", &fieldError{field: field, value: v}
}

// fieldError is a str field that failed pydantic's validation.
type fieldError struct {
	field string
	value pyValue
}

// validationError is str(pydantic.ValidationError) for str fields that
// got something else, in the model's field order.
func validationError(model string, errs []*fieldError) error {
	var b strings.Builder
	if len(errs) == 1 {
		fmt.Fprintf(&b, "1 validation error for %s", model)
	} else {
		fmt.Fprintf(&b, "%d validation errors for %s", len(errs), model)
	}
	for _, e := range errs {
		fmt.Fprintf(&b, "\n%s\n  Input should be a valid string [type=string_type, input_value=%s, input_type=%s]\n    For further information visit https://errors.pydantic.dev/2.14/v/string_type",
			e.field, truncateRepr(pyRepr(e.value)), pyType(e.value))
	}
	return fmt.Errorf("%s", b.String())
}

// truncateRepr shortens a long input_value as pydantic-core does.
func truncateRepr(s string) string {
	r := []rune(s)
	if len(r) <= 50 {
		return s
	}
	return string(r[:25]) + "..." + string(r[len(r)-24:])
}
