package telecom

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pyjson"
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
		return argValue{}, fmt.Errorf("argument %s: %w", name, err)
	}
	return v, nil
}

// parseArg reads a JSON value as json.loads would into Python.
func parseArg(raw json.RawMessage) (argValue, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	x, err := readArgJSON(dec)
	if err != nil {
		return argValue{}, fmt.Errorf("not JSON: %s", raw)
	}
	v := argValue{text: argStr(x, false)}
	switch x := x.(type) {
	case nil:
		v.kind = kindNone
	case bool:
		v.kind = kindBool
		if x {
			v.num = 1
		}
	case json.Number:
		v.kind = kindFloat
		if isIntText(string(x)) {
			v.kind = kindInt
		}
		v.num, _ = strconv.ParseFloat(string(x), 64)
	case string:
		v.kind, v.s = kindStr, x
	case []any:
		v.kind = kindList
	case *pyjson.Dict[any]:
		v.kind = kindDict
	}
	return v, nil
}

func isIntText(s string) bool { return !strings.ContainsAny(s, ".eE") }

// readArgJSON decodes a JSON value keeping object key order, as a Python
// dict would.
func readArgJSON(dec *json.Decoder) (any, error) {
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
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := readArgJSON(dec)
				if err != nil {
					return nil, err
				}
				d.Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := readArgJSON(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	}
	return tok, nil
}

// argStr is str(x) (repr(x) when repr is set, as inside a list or dict)
// of a value readArgJSON gave.
func argStr(x any, repr bool) string {
	switch x := x.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case json.Number:
		s := string(x)
		if isIntText(s) {
			if strings.TrimLeft(s, "-0") == "" {
				return "0"
			}
			return s
		}
		f, _ := strconv.ParseFloat(s, 64)
		switch {
		case math.IsInf(f, 1):
			return "inf"
		case math.IsInf(f, -1):
			return "-inf"
		}
		return pyjson.FloatRepr(f)
	case string:
		if repr {
			return argRepr(x)
		}
		return x
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = argStr(e, true)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *pyjson.Dict[any]:
		parts := make([]string, 0, x.Len())
		for _, k := range x.Keys() {
			e, _ := x.Get(k)
			parts = append(parts, argRepr(k)+": "+argStr(e, true))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(x)
}

// argRepr is repr(s) of a Python str: single quotes unless the string has
// a single quote and no double one; non-printable characters escaped.
func argRepr(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
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
	b.WriteByte(q)
	return b.String()
}

// noAttributeError is Python's AttributeError text for calling a str method
// (lower, startswith) on a value that is not a str.
func noAttributeError(v argValue, attr string) error {
	return fmt.Errorf("'%s' object has no attribute '%s'", v.kind.typeName(), attr)
}
