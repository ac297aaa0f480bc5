// Package pyvalue is a JSON value as tau2's Python code sees it.
//
// tau2 hands a tool call's JSON arguments to the Python method unchecked,
// so an argument of the wrong type meets whatever Python does with it: it
// is printed by an f-string, compared, looked up in a dict, or validated
// by a pydantic model. Parse gives the value json.loads makes, and Str,
// Repr and ValidationError give the texts Python and pydantic write about
// it, so the Go tools answer in tau2's words.
package pyvalue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode"

	"evals.si/harness/taubench/pycalc"
	"evals.si/harness/taubench/pyjson"
)

// Parse is json.loads(raw): a string, *big.Int (int), float64, bool, nil
// (None), []any (list) or *pyjson.Dict[any] (dict, keys in order).
func Parse(raw []byte) (any, error) {
	return decode(raw, pyNumber)
}

// Ordered decodes raw keeping what re-encoding it needs: objects become
// *pyjson.Dict[any] (keys in order) and numbers json.Number (their text).
func Ordered(raw []byte) (any, error) {
	return decode(raw, func(n json.Number) (any, error) { return n, nil })
}

// Arg is argument name of a call as Parse gives it; an absent one is None.
func Arg(args map[string]json.RawMessage, name string) (any, error) {
	raw, ok := args[name]
	if !ok {
		return nil, nil
	}
	v, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("argument %s: %s: %w", name, raw, err)
	}
	return v, nil
}

func decode(raw []byte, number func(json.Number) (any, error)) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := read(dec, number)
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	return v, nil
}

func read(dec *json.Decoder, number func(json.Number) (any, error)) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			out := []any{}
			for dec.More() {
				v, err := read(dec, number)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		case '{':
			d := &pyjson.Dict[any]{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := read(dec, number)
				if err != nil {
					return nil, err
				}
				d.Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		return number(t)
	}
	return tok, nil // string, bool or nil
}

// pyNumber is json.loads's number: an int (of any size) unless the literal
// has a fraction or an exponent.
func pyNumber(n json.Number) (any, error) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		i, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, fmt.Errorf("bad integer %s", s)
		}
		return i, nil
	}
	// json.loads turns an out-of-range literal into ±inf too.
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return nil, err
	}
	return f, nil
}

// Type is type(v).__name__.
func Type(v any) string {
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
	case *pyjson.Dict[any]:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

// Str is str(v), what an f-string writes.
func Str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return Repr(v)
}

// Repr is repr(v).
func Repr(v any) string {
	switch x := v.(type) {
	case string:
		return StrRepr(x)
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
			parts[i] = Repr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *pyjson.Dict[any]:
		parts := make([]string, 0, x.Len())
		for _, k := range x.Keys() {
			e, _ := x.Get(k)
			parts = append(parts, StrRepr(k)+": "+Repr(e))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

// StrRepr is repr(s) of a str: single quotes unless s has a single quote
// and no double one; the quote, backslash and unprintable characters
// escaped as CPython does (\xhh up to U+00FF, then \uhhhh and \Uhhhhhhhh).
func StrRepr(s string) string {
	q := '\''
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteRune(q)
	for _, r := range s {
		switch {
		case r == q || r == '\\':
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
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteRune(q)
	return b.String()
}

// Unhashable is the TypeError of using v as a dict key or set member, nil
// when v is hashable (a list or dict is not).
func Unhashable(v any) error {
	switch v.(type) {
	case []any, *pyjson.Dict[any]:
		return fmt.Errorf("unhashable type: '%s'", Type(v))
	}
	return nil
}

// StrKey is how `v in d` and d[v] see v for a dict keyed by strings: the
// key to look up, or ok=false when v is hashable but no str (never
// found); a list or dict raises TypeError.
func StrKey(v any) (key string, ok bool, err error) {
	if s, ok := v.(string); ok {
		return s, true, nil
	}
	return "", false, Unhashable(v)
}
