// Package pyjson writes values as Python's json.dumps does (", " and ": "
// separators, ensure_ascii, float repr), which tau2 uses for what a tool
// returns to the model and, with sort_keys, for the database hash the
// grading compares. Struct fields are written in declaration order, as
// pydantic's model_dump keeps them; Dict keeps its keys' insertion order,
// as a Python dict does.
package pyjson

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Stringer is a value json.dumps(default=str) writes as the string str()
// gives: a date, a datetime, an enum member.
type Stringer interface {
	PyStr() string
}

// orderedMap is what Dict implements for the encoder.
type orderedMap interface {
	pyKeys() []string
	pyValue(key string) any
}

// Dumps is json.dumps(v).
func Dumps(v any) (string, error) {
	var b bytes.Buffer
	if err := encode(&b, reflect.ValueOf(v), false); err != nil {
		return "", err
	}
	return b.String(), nil
}

// DumpsSorted is json.dumps(v, sort_keys=True, default=str).
func DumpsSorted(v any) (string, error) {
	var b bytes.Buffer
	if err := encode(&b, reflect.ValueOf(v), true); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Hash is tau2's get_dict_hash of a model's dump: the hex SHA-256 of
// json.dumps(model_dump(), sort_keys=True, default=str).
func Hash(v any) (string, error) {
	s, err := DumpsSorted(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:]), nil
}

var stringerType = reflect.TypeFor[Stringer]()
var orderedType = reflect.TypeFor[orderedMap]()

func encode(b *bytes.Buffer, v reflect.Value, sorted bool) error {
	if !v.IsValid() {
		b.WriteString("null")
		return nil
	}
	if v.Type().Implements(stringerType) {
		if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
			b.WriteString("null")
			return nil
		}
		writeString(b, v.Interface().(Stringer).PyStr())
		return nil
	}
	if v.Type().Implements(orderedType) {
		if v.Kind() == reflect.Pointer && v.IsNil() {
			b.WriteString("null")
			return nil
		}
		m := v.Interface().(orderedMap)
		keys := m.pyKeys()
		if sorted {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		return writeObject(b, keys, func(k string) reflect.Value { return reflect.ValueOf(m.pyValue(k)) }, sorted)
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			b.WriteString("null")
			return nil
		}
		return encode(b, v.Elem(), sorted)
	case reflect.Bool:
		if v.Bool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		b.WriteString(FloatRepr(v.Float()))
	case reflect.String:
		writeString(b, v.String())
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			// A Go nil slice is an empty list: pydantic lists are never None
			// unless the field is Optional, which a pointer expresses.
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := encode(b, v.Index(i), sorted); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return fmt.Errorf("pyjson: map key type %s: only string keys", v.Type().Key())
		}
		if v.IsNil() {
			b.WriteString("{}")
			return nil
		}
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		// A Go map has no order: written sorted either way. Use Dict where
		// the order a Python dict would keep matters.
		sort.Strings(keys)
		return writeObject(b, keys, func(k string) reflect.Value { return v.MapIndex(reflect.ValueOf(k).Convert(v.Type().Key())) }, sorted)
	case reflect.Struct:
		return writeStruct(b, v, sorted)
	default:
		return fmt.Errorf("pyjson: cannot write a %s", v.Type())
	}
	return nil
}

func writeObject(b *bytes.Buffer, keys []string, value func(string) reflect.Value, sorted bool) error {
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		writeString(b, k)
		b.WriteString(": ")
		if err := encode(b, value(k), sorted); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// field is one struct field as the encoder writes it.
type field struct {
	name  string
	value reflect.Value
}

// fieldCache memoizes each struct type's field layout (plain and sorted),
// as encoding/json does: hashing a database walks the same types many
// thousands of times.
var fieldCache sync.Map // fieldKey -> []fieldPath

type fieldKey struct {
	t      reflect.Type
	sorted bool
}

// fieldPath is a field's json name and its index path from the struct.
type fieldPath struct {
	name  string
	index []int
}

func layout(t reflect.Type, sorted bool) []fieldPath {
	key := fieldKey{t, sorted}
	if l, ok := fieldCache.Load(key); ok {
		return l.([]fieldPath)
	}
	l := collect(t, nil, nil)
	if sorted {
		sort.SliceStable(l, func(i, j int) bool { return l[i].name < l[j].name })
	}
	fieldCache.Store(key, l)
	return l
}

func collect(t reflect.Type, prefix []int, out []fieldPath) []fieldPath {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		index := append(append([]int(nil), prefix...), i)
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = collect(f.Type, index, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, fieldPath{name, index})
	}
	return out
}

func writeStruct(b *bytes.Buffer, v reflect.Value, sorted bool) error {
	paths := layout(v.Type(), sorted)
	fields := make([]field, len(paths))
	for i, p := range paths {
		fields[i] = field{p.name, v.FieldByIndex(p.index)}
	}
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteString(", ")
		}
		writeString(b, f.name)
		b.WriteString(": ")
		if err := encode(b, f.value, sorted); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	b.WriteByte('}')
	return nil
}

const hexDigits = "0123456789abcdef"

// writeString writes s as json.dumps does with ensure_ascii: every
// non-ASCII character as \uXXXX (a surrogate pair above U+FFFF).
func writeString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			// Python escapes everything outside ' '..'~' (DEL included).
			switch {
			case r >= 0x20 && r < 0x7f:
				b.WriteRune(r)
			case r <= 0xffff:
				writeU(b, r)
			default:
				r -= 0x10000
				writeU(b, 0xd800+(r>>10))
				writeU(b, 0xdc00+(r&0x3ff))
			}
		}
	}
	b.WriteByte('"')
}

func writeU(b *bytes.Buffer, r rune) {
	b.WriteString(`\u`)
	b.WriteByte(hexDigits[(r>>12)&0xf])
	b.WriteByte(hexDigits[(r>>8)&0xf])
	b.WriteByte(hexDigits[(r>>4)&0xf])
	b.WriteByte(hexDigits[r&0xf])
}

// FloatRepr is Python's repr(float): the shortest digits that round-trip,
// in positional notation when the exponent is in [-4, 16), with ".0" on a
// whole number; scientific ("1e+16", "1.5e-07") otherwise.
func FloatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.ContainsAny(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	return fmt.Sprintf("%se%s%02d", mant, sign, exp)
}
