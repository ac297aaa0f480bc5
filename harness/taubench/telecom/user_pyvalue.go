package telecom

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"evals.si/harness/taubench/pyjson"
)

// tau2's user tools take their arguments unvalidated: a value of the
// wrong JSON type flows into f-strings, dict look-ups and pydantic models
// as Python sees it. These helpers give an argument's Python view:
// json.loads' value (str, int, float, bool, None, list, dict), its str(),
// repr() and type name.

// pyArg decodes argument name as json.loads would: a string, a *big.Int,
// a float64, a bool, nil, []any or *pyjson.Dict[any] (keys in order).
func pyArg(a map[string]json.RawMessage, name string) (any, error) {
	raw, ok := a[name]
	if !ok {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := pyRead(dec)
	if err != nil {
		return nil, fmt.Errorf("argument %s: %s is not JSON: %w", name, raw, err)
	}
	return v, nil
}

func pyRead(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			d := &pyjson.Dict[any]{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := pyRead(dec)
				if err != nil {
					return nil, err
				}
				d.Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		}
		out := []any{}
		for dec.More() {
			v, err := pyRead(dec)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		_, err := dec.Token()
		return out, err
	case json.Number:
		s := string(t)
		if strings.ContainsAny(s, ".eE") {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil && f == 0 {
				return nil, err
			}
			return f, nil // an out-of-range literal is ±inf, as in Python
		}
		n, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, fmt.Errorf("bad number %s", s)
		}
		return n, nil
	}
	return tok, nil // string, bool or nil
}

// pyTypeName is type(v).__name__.
func pyTypeName(v any) string {
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

// pyStr is str(v), what an f-string writes.
func pyStr(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return pyRepr(v)
}

// pyRepr is repr(v).
func pyRepr(v any) string {
	switch x := v.(type) {
	case string:
		return pyReprString(x)
	case *big.Int:
		return x.String()
	case float64:
		return pyjson.FloatRepr(x)
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
			parts = append(parts, pyReprString(k)+": "+pyRepr(e))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

// pyReprString is a str's repr: single quotes unless the text has one
// and no double quote; escapes for the quote, backslash and unprintable
// characters.
func pyReprString(s string) string {
	quote := '\''
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	var b strings.Builder
	b.WriteRune(quote)
	for _, r := range s {
		switch {
		case r == quote || r == '\\':
			b.WriteRune('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < utf8.RuneSelf || unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteRune(quote)
	return b.String()
}

// pyHashable reports the TypeError a dict look-up with key v raises.
func pyHashable(v any) error {
	switch v.(type) {
	case []any, *pyjson.Dict[any]:
		return fmt.Errorf("unhashable type: '%s'", pyTypeName(v))
	}
	return nil
}

// pydanticVersion is the pydantic minor version tau2's recordings were
// made with; its validation errors link to its docs.
const pydanticVersion = "2.14"

// validationError is one line item of a pydantic ValidationError.
type validationError struct {
	loc, msg, kind string
	input          any
}

// pydanticError is str(ValidationError) for model's errs.
func pydanticError(model string, errs []validationError) error {
	var b strings.Builder
	if len(errs) == 1 {
		fmt.Fprintf(&b, "1 validation error for %s", model)
	} else {
		fmt.Fprintf(&b, "%d validation errors for %s", len(errs), model)
	}
	for _, e := range errs {
		fmt.Fprintf(&b, "\n%s\n  %s [type=%s, input_value=%s, input_type=%s]\n    For further information visit https://errors.pydantic.dev/%s/v/%s",
			e.loc, e.msg, e.kind, truncatedRepr(e.input), pyTypeName(e.input), pydanticVersion, e.kind)
	}
	return fmt.Errorf("%s", b.String())
}

// truncatedRepr is the input's repr as pydantic shows it: over 50
// characters, the first 25 and the last 24 around "...".
func truncatedRepr(v any) string {
	r := []rune(pyRepr(v))
	if len(r) <= 50 {
		return string(r)
	}
	return string(r[:25]) + "..." + string(r[len(r)-24:])
}

// validateAPNSettings is APNSettings(**d): pydantic's lax validation of
// each field, defaults for the absent ones, extra fields refused.
func validateAPNSettings(d *pyjson.Dict[any]) (APNSettings, error) {
	out := DefaultAPNSettings()
	var errs []validationError
	bad := func(loc, msg, kind string, in any) {
		errs = append(errs, validationError{loc, msg, kind, in})
	}
	optString := func(name string, dst **string) {
		v, ok := d.Get(name)
		if !ok {
			return
		}
		switch x := v.(type) {
		case nil:
			*dst = nil
		case string:
			*dst = &x
		default:
			bad(name, "Input should be a valid string", "string_type", v)
		}
	}
	if v, ok := d.Get("apn_name"); ok {
		switch s, _ := v.(string); APNName(s) {
		case APNInternet, APNBroken:
			out.APNName = APNName(s)
		default:
			bad("apn_name", "Input should be 'internet' or 'broken'", "enum", v)
		}
	}
	if v, ok := d.Get("reset_at_reboot"); ok {
		if b, kind := laxBool(v); kind == "" {
			out.ResetAtReboot = b
		} else if kind == "bool_parsing" {
			bad("reset_at_reboot", "Input should be a valid boolean, unable to interpret input", kind, v)
		} else {
			bad("reset_at_reboot", "Input should be a valid boolean", kind, v)
		}
	}
	optString("mms_apn", &out.MMSAPN)
	optString("mmsc_url", &out.MMSCURL)
	optString("mms_proxy", &out.MMSProxy)
	if v, ok := d.Get("mms_port"); ok {
		if v == nil {
			out.MMSPort = nil
		} else if n, kind := laxInt(v); kind == "" {
			out.MMSPort = &n
		} else {
			msg := map[string]string{
				"int_type":       "Input should be a valid integer",
				"int_parsing":    "Input should be a valid integer, unable to parse string as an integer",
				"int_from_float": "Input should be a valid integer, got a number with a fractional part",
			}[kind]
			bad("mms_port", msg, kind, v)
		}
	}
	known := map[string]bool{"apn_name": true, "reset_at_reboot": true, "mms_apn": true,
		"mmsc_url": true, "mms_proxy": true, "mms_port": true}
	for _, k := range d.Keys() {
		if !known[k] {
			v, _ := d.Get(k)
			bad(k, "Extra inputs are not permitted", "extra_forbidden", v)
		}
	}
	if len(errs) > 0 {
		return APNSettings{}, pydanticError("APNSettings", errs)
	}
	return out, nil
}

// laxBool is pydantic's lax bool validation: the value, or the error
// type when v is not a boolean.
func laxBool(v any) (bool, string) {
	switch x := v.(type) {
	case bool:
		return x, ""
	case *big.Int:
		switch {
		case x.Sign() == 0:
			return false, ""
		case x.IsInt64() && x.Int64() == 1:
			return true, ""
		}
		return false, "bool_parsing"
	case float64:
		switch x {
		case 0:
			return false, ""
		case 1:
			return true, ""
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

// laxInt is pydantic's lax int validation: the value, or the error type
// when v is not an integer.
func laxInt(v any) (int, string) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, ""
		}
		return 0, ""
	case *big.Int:
		if !x.IsInt64() || int64(int(x.Int64())) != x.Int64() {
			return 0, "int_parsing" // beyond Go's int; tau2 keeps big ints
		}
		return int(x.Int64()), ""
	case float64:
		if x != float64(int(x)) {
			return 0, "int_from_float"
		}
		return int(x), ""
	case string:
		s := strings.TrimSpace(x)
		// "8.0" is accepted, as an integral float written as text.
		if i := strings.IndexByte(s, '.'); i >= 0 && strings.Trim(s[i+1:], "0") == "" {
			s = s[:i]
		}
		digits := strings.TrimLeft(s, "+-")
		if len(s)-len(digits) > 1 || digits == "" || digits[0] == '_' || digits[len(digits)-1] == '_' ||
			strings.Contains(digits, "__") {
			return 0, "int_parsing"
		}
		n, err := strconv.Atoi(strings.ReplaceAll(s, "_", ""))
		if err != nil {
			return 0, "int_parsing"
		}
		return n, ""
	}
	return 0, "int_type"
}
