package airline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"evals.si/harness/taubench/pyjson"
)

// tau2 calls the tools with the JSON arguments as Python values, unchecked:
// what a wrong-typed argument does is whatever Python and pydantic do with
// it. These helpers give the texts of the errors that follow: Python's
// str() and repr() of a JSON value, and pydantic's ValidationError.

// kind is the Python type a JSON value decodes to.
func kind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "NoneType"
	}
	switch raw[0] {
	case '{':
		return "dict"
	case '[':
		return "list"
	case '"':
		return "str"
	case 't', 'f':
		return "bool"
	case 'n':
		return "NoneType"
	}
	if isJSONInt(raw) {
		return "int"
	}
	return "float"
}

func isJSONInt(raw json.RawMessage) bool {
	return !bytes.ContainsAny(raw, ".eE")
}

// pyStr is Python's str() of a JSON value.
func pyStr(raw json.RawMessage) string {
	if kind(raw) == "str" {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	return pyRepr(raw)
}

// pyRepr is Python's repr() of a JSON value as json.loads gives it.
func pyRepr(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	switch kind(raw) {
	case "NoneType":
		return "None"
	case "bool":
		if string(raw) == "true" {
			return "True"
		}
		return "False"
	case "int":
		return string(raw)
	case "float":
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return "inf"
		}
		return pyjson.FloatRepr(f)
	case "str":
		var s string
		_ = json.Unmarshal(raw, &s)
		return strRepr(s)
	case "list":
		var items []json.RawMessage
		_ = json.Unmarshal(raw, &items)
		parts := make([]string, len(items))
		for i, x := range items {
			parts[i] = pyRepr(x)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	var d pyjson.Dict[json.RawMessage]
	_ = json.Unmarshal(raw, &d)
	parts := make([]string, 0, d.Len())
	for _, k := range d.Keys() {
		v, _ := d.Get(k)
		parts = append(parts, strRepr(k)+": "+pyRepr(v))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// strRepr is Python's repr() of a str.
func strRepr(s string) string {
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
		case r > 0x7f && !unicode.IsPrint(r):
			if r <= 0xffff {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// lineError is one error of a pydantic ValidationError.
type lineError struct {
	loc, msg, typ string
	input         json.RawMessage
}

// validationError is pydantic's ValidationError for model.
type validationError struct {
	model string
	lines []lineError
}

func (e *validationError) add(loc, typ, msg string, input json.RawMessage) {
	e.lines = append(e.lines, lineError{loc: loc, msg: msg, typ: typ, input: input})
}

// err is the ValidationError, nil without errors.
func (e *validationError) err() error {
	if len(e.lines) == 0 {
		return nil
	}
	return e
}

func (e *validationError) Error() string {
	var b strings.Builder
	plural := "s"
	if len(e.lines) == 1 {
		plural = ""
	}
	fmt.Fprintf(&b, "%d validation error%s for %s", len(e.lines), plural, e.model)
	for _, l := range e.lines {
		fmt.Fprintf(&b, "\n%s\n  %s [type=%s, input_value=%s, input_type=%s]\n    For further information visit https://errors.pydantic.dev/2.14/v/%s",
			l.loc, l.msg, l.typ, truncRepr(pyRepr(l.input)), kind(l.input), l.typ)
	}
	return b.String()
}

// truncRepr shortens a long repr as pydantic-core does.
func truncRepr(s string) string {
	r := []rune(s)
	if len(r) <= 50 {
		return s
	}
	return string(r[:25]) + "..." + string(r[len(r)-24:])
}

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

// str validates a str field in pydantic's lax mode; prefix is the
// location of the model in an enclosing one ("passengers.1.").
func (f fields) str(ve *validationError, prefix, name string) string {
	v, ok := f.m[name]
	if !ok {
		ve.add(prefix+name, "missing", "Field required", f.raw)
		return ""
	}
	return validStr(ve, prefix+name, v)
}

// integer validates an int field in pydantic's lax mode.
func (f fields) integer(ve *validationError, prefix, name string) int {
	v, ok := f.m[name]
	if !ok {
		ve.add(prefix+name, "missing", "Field required", f.raw)
		return 0
	}
	return validInt(ve, prefix+name, v)
}

func validStr(ve *validationError, loc string, v json.RawMessage) string {
	if kind(v) != "str" {
		ve.add(loc, "string_type", "Input should be a valid string", v)
		return ""
	}
	return pyStr(v)
}

// validInt is pydantic's lax int: an integer, a float without a fraction,
// or a string that parses as one.
func validInt(ve *validationError, loc string, v json.RawMessage) int {
	switch kind(v) {
	case "int":
		n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
		if err != nil {
			ve.add(loc, "int_parsing_size", "Unable to parse input string as an integer, exceeded maximum size", v)
		}
		return n
	case "float":
		f, _ := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
		if f != float64(int(f)) {
			ve.add(loc, "int_from_float", "Input should be a valid integer, got a number with a fractional part", v)
			return 0
		}
		return int(f)
	case "str":
		n, err := strconv.Atoi(strings.TrimSpace(pyStr(v)))
		if err != nil {
			ve.add(loc, "int_parsing", "Input should be a valid integer, unable to parse string as an integer", v)
		}
		return n
	case "bool":
		if string(bytes.TrimSpace(v)) == "true" {
			return 1
		}
		return 0
	}
	ve.add(loc, "int_type", "Input should be a valid integer", v)
	return 0
}

// literal validates a Literal field of string choices.
func literal(ve *validationError, loc string, v json.RawMessage, choices ...string) string {
	s := pyStr(v)
	if kind(v) == "str" {
		for _, c := range choices {
			if s == c {
				return s
			}
		}
	}
	quoted := make([]string, len(choices))
	for i, c := range choices {
		quoted[i] = "'" + c + "'"
	}
	want := quoted[0]
	if len(quoted) > 1 {
		want = strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]
	}
	ve.add(loc, "literal_error", "Input should be "+want, v)
	return ""
}

// validFloat is pydantic's lax float: a number, a bool, or a string that
// parses as one.
func validFloat(ve *validationError, loc string, v json.RawMessage) float64 {
	switch kind(v) {
	case "int", "float":
		f, _ := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
		return f
	case "bool":
		if string(bytes.TrimSpace(v)) == "true" {
			return 1
		}
		return 0
	case "str":
		f, err := strconv.ParseFloat(strings.TrimSpace(pyStr(v)), 64)
		if err != nil {
			ve.add(loc, "float_parsing", "Input should be a valid number, unable to parse string as a number", v)
		}
		return f
	}
	ve.add(loc, "float_type", "Input should be a valid number", v)
	return 0
}
