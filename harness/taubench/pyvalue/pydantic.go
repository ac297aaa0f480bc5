package pyvalue

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// PydanticVersion is the pydantic minor version tau2's recordings were
// made with; its validation errors link to its docs.
const PydanticVersion = "2.14"

// ValidationError is str(pydantic.ValidationError) for Model: one entry
// per failed field, in the order pydantic reports them.
type ValidationError struct {
	Model  string
	Errors []LineError
}

// LineError is one error of a ValidationError: the field's location
// ("passengers.1.dob"), pydantic's error type and message, and the input
// as Parse gives it.
type LineError struct {
	Loc, Type, Msg string
	Input          any
}

// Add records an error at loc.
func (e *ValidationError) Add(loc, typ, msg string, input any) {
	e.Errors = append(e.Errors, LineError{Loc: loc, Type: typ, Msg: msg, Input: input})
}

// Err is e as an error, nil when no error was added.
func (e *ValidationError) Err() error {
	if len(e.Errors) == 0 {
		return nil
	}
	return e
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	plural := "s"
	if len(e.Errors) == 1 {
		plural = ""
	}
	fmt.Fprintf(&b, "%d validation error%s for %s", len(e.Errors), plural, e.Model)
	for _, l := range e.Errors {
		fmt.Fprintf(&b, "\n%s\n  %s [type=%s, input_value=%s, input_type=%s]\n    For further information visit https://errors.pydantic.dev/%s/v/%s",
			l.Loc, l.Msg, l.Type, InputRepr(l.Input), Type(l.Input), PydanticVersion, l.Type)
	}
	return b.String()
}

// InputRepr is v's repr as pydantic-core shows an input_value: beyond 50
// bytes of UTF-8, the first 25 and the last 24 around "...", each cut
// back to whole characters.
func InputRepr(v any) string {
	s := Repr(v)
	if len(s) <= 50 {
		return s
	}
	end := 25
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	start := len(s) - 24
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return s[:end] + "..." + s[start:]
}

// The field validators below are pydantic's lax (Python-mode) coercions,
// as a model built from json.loads's values applies them: each returns
// the field's value, or records the error at loc and returns the zero
// value. pydantic keeps integers of any size; a Go int cannot, so an int
// beyond int64 is refused as pydantic refuses an oversized float.

// Str is a str field: only a str validates.
func (e *ValidationError) Str(loc string, v any) string { return field(e, loc, v, strictStr) }

// Int is an int field.
func (e *ValidationError) Int(loc string, v any) int { return field(e, loc, v, laxInt) }

// Float is a float field.
func (e *ValidationError) Float(loc string, v any) float64 { return field(e, loc, v, laxFloat) }

// Bool is a bool field.
func (e *ValidationError) Bool(loc string, v any) bool { return field(e, loc, v, laxBool) }

// field is v validated by validate, which gives the value or the error
// type; a failure is recorded at loc.
func field[T any](e *ValidationError, loc string, v any, validate func(any) (T, string)) T {
	out, typ := validate(v)
	if typ != "" {
		e.Add(loc, typ, message(typ), v)
	}
	return out
}

func strictStr(v any) (string, string) {
	if s, ok := v.(string); ok {
		return s, ""
	}
	return "", "string_type"
}

// Literal is a Literal[...] field of string choices.
func (e *ValidationError) Literal(loc string, v any, choices ...string) string {
	if s, ok := v.(string); ok && slices.Contains(choices, s) {
		return s
	}
	quoted := make([]string, len(choices))
	for i, c := range choices {
		quoted[i] = StrRepr(c)
	}
	want := quoted[len(quoted)-1]
	if len(quoted) > 1 {
		want = strings.Join(quoted[:len(quoted)-1], ", ") + " or " + want
	}
	e.Add(loc, "literal_error", "Input should be "+want, v)
	return ""
}

// message is pydantic's message for an error type.
func message(typ string) string {
	switch typ {
	case "string_type":
		return "Input should be a valid string"
	case "int_type":
		return "Input should be a valid integer"
	case "int_parsing":
		return "Input should be a valid integer, unable to parse string as an integer"
	case "int_from_float":
		return "Input should be a valid integer, got a number with a fractional part"
	case "int_parsing_size":
		return "Unable to parse input string as an integer, exceeded maximum size"
	case "finite_number":
		return "Input should be a finite number"
	case "float_type":
		return "Input should be a valid number"
	case "float_parsing":
		return "Input should be a valid number, unable to parse string as a number"
	case "bool_type":
		return "Input should be a valid boolean"
	case "bool_parsing":
		return "Input should be a valid boolean, unable to interpret input"
	}
	return typ
}

// laxInt is an int field's value, or the error type.
func laxInt(v any) (int, string) {
	switch x := v.(type) {
	case bool:
		return boolInt(x), ""
	case *big.Int:
		if !x.IsInt64() {
			return 0, "int_parsing_size"
		}
		return int(x.Int64()), ""
	case float64:
		switch {
		case math.IsInf(x, 0) || math.IsNaN(x):
			return 0, "finite_number"
		case x != math.Trunc(x):
			return 0, "int_from_float"
		case x < -(1<<63) || x >= 1<<63:
			return 0, "int_parsing_size"
		}
		return int(x), ""
	case string:
		return strInt(x)
	}
	return 0, "int_type"
}

// boolInt is int(b): a bool is an int in Python.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// strInt parses an int field's string as pydantic-core does: surrounding
// whitespace and a fraction of zeros ("8.0") dropped, one sign, digits
// with single underscores between them.
func strInt(s string) (int, string) {
	s = strings.TrimSpace(s)
	if len(s) > 4300 {
		return 0, "int_parsing_size"
	}
	if whole, frac, ok := strings.Cut(s, "."); ok {
		if frac == "" || strings.Trim(frac, "0") != "" {
			return 0, "int_parsing"
		}
		s = whole
	}
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "+"), "-")
	if len(s)-len(digits) > 1 || !underscored(digits, "0123456789") {
		return 0, "int_parsing"
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil {
		return 0, "int_parsing_size" // only a range error is left
	}
	return int(n), ""
}

// underscored reports whether s is a non-empty run of chars with single
// underscores between them.
func underscored(s, chars string) bool {
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' || strings.Contains(s, "__") {
		return false
	}
	for _, r := range s {
		if r != '_' && !strings.ContainsRune(chars, r) {
			return false
		}
	}
	return true
}

// laxFloat is a float field's value, or the error type.
func laxFloat(v any) (float64, string) {
	switch x := v.(type) {
	case bool:
		return float64(boolInt(x)), ""
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		if math.IsInf(f, 0) {
			return 0, "float_type"
		}
		return f, ""
	case float64:
		return x, ""
	case string:
		return strFloat(x)
	}
	return 0, "float_type"
}

// strFloat parses a float field's string as pydantic-core does: Rust's
// float syntax (inf, infinity and nan in any case, with a sign; no hex)
// after surrounding whitespace and single underscores are dropped.
func strFloat(s string) (float64, string) {
	s = strings.TrimSpace(s)
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' || strings.Contains(s, "__") ||
		strings.ContainsAny(s, "xX") {
		return 0, "float_parsing"
	}
	s = strings.ReplaceAll(s, "_", "")
	if strings.EqualFold(strings.TrimLeft(s, "+-"), "nan") && len(s) <= 4 {
		return math.NaN(), ""
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return 0, "float_parsing"
	}
	return f, ""
}

// laxBool is a bool field's value, or the error type.
func laxBool(v any) (bool, string) {
	switch x := v.(type) {
	case bool:
		return x, ""
	case *big.Int:
		if !x.IsInt64() {
			return false, "bool_type"
		}
		switch x.Int64() {
		case 0:
			return false, ""
		case 1:
			return true, ""
		}
		return false, "bool_parsing"
	case float64:
		switch {
		case x == 0:
			return false, ""
		case x == 1:
			return true, ""
		case x == math.Trunc(x) && x >= -(1<<63) && x < 1<<63:
			return false, "bool_parsing"
		}
		return false, "bool_type"
	case string:
		switch strings.ToLower(x) {
		case "0", "off", "f", "false", "n", "no":
			return false, ""
		case "1", "on", "t", "true", "y", "yes":
			return true, ""
		}
		return false, "bool_parsing"
	}
	return false, "bool_type"
}
