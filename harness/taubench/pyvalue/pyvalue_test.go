package pyvalue

import (
	"encoding/json"
	"math"
	"math/big"
	"strings"
	"testing"

	"evals.si/harness/taubench/pyjson"
)

// The expected texts below are CPython 3's and pydantic 2.14's, printed
// by the tau2 reference environment (/work/tau2ref/venv) for the same
// inputs.

var reprCases = []struct{ json, repr, str, typ string }{
	{`"it's"`, `"it's"`, `it's`, `str`},
	{`"a\"b'c"`, `'a"b\'c'`, `a"b'c`, `str`},
	{`"both ' and \""`, `'both \' and "'`, `both ' and "`, `str`},
	{`[1, "a", null, true, 2.5]`, `[1, 'a', None, True, 2.5]`, `[1, 'a', None, True, 2.5]`, `list`},
	{`{"b": 1, "a": [false]}`, `{'b': 1, 'a': [False]}`, `{'b': 1, 'a': [False]}`, `dict`},
	{`{"a": [1, 2.0, true, null], "b": "x\ny"}`, `{'a': [1, 2.0, True, None], 'b': 'x\ny'}`, `{'a': [1, 2.0, True, None], 'b': 'x\ny'}`, `dict`},
	{`-0`, `0`, `0`, `int`},
	{`1e400`, `inf`, `inf`, `float`},
	{`-1e400`, `-inf`, `-inf`, `float`},
	{`1E2`, `100.0`, `100.0`, `float`},
	{`1e3`, `1000.0`, `1000.0`, `float`},
	{`2E0`, `2.0`, `2.0`, `float`},
	{`10.5`, `10.5`, `10.5`, `float`},
	{`1e100`, `1e+100`, `1e+100`, `float`},
	{`1e22`, `1e+22`, `1e+22`, `float`},
	{`1e-400`, `0.0`, `0.0`, `float`},
	{`0.0001`, `0.0001`, `0.0001`, `float`},
	{`1e16`, `1e+16`, `1e+16`, `float`},
	{`12345678901234567890123`, `12345678901234567890123`, `12345678901234567890123`, `int`},
	{`"plain"`, `'plain'`, `plain`, `str`},
	{`"tab\tnew\nline\\"`, `'tab\tnew\nline\\'`, "tab\tnew\nline\\", `str`},
	{`"\u0001\u00e9\u200b"`, `'\x01é\u200b'`, "\x01é\u200b", `str`},
	{`"\n\t\u0001\u00a0é☃😀\\"`, `'\n\t\x01\xa0é☃😀\\'`, "\n\t\x01\u00a0é☃😀\\", `str`},
	{`"a\u0085\u00ad\u2028\ud83d\ude00\udb40\udc01\u0378"`, `'a\x85\xad\u2028😀\U000e0001\u0378'`, "a\u0085\u00ad\u2028😀\U000e0001\u0378", `str`},
	{`"\r\u007f\u001b"`, `'\r\x7f\x1b'`, "\r\x7f\x1b", `str`},
	{`[]`, `[]`, `[]`, `list`},
	{`{}`, `{}`, `{}`, `dict`},
	{`{"k": [1, 2.5, null, true]}`, `{'k': [1, 2.5, None, True]}`, `{'k': [1, 2.5, None, True]}`, `dict`},
	{`["C1001", 2, null, false, 1.0, "it's"]`, `['C1001', 2, None, False, 1.0, "it's"]`, `['C1001', 2, None, False, 1.0, "it's"]`, `list`},
	{`false`, `False`, `False`, `bool`},
	{`null`, `None`, `None`, `NoneType`},
	{`"x"`, `'x'`, `x`, `str`},
	{`""`, `''`, ``, `str`},
}
var intCases = []struct {
	in   any
	want int
	typ  string
}{
	{`80`, 80, ""},
	{` 80 `, 80, ""},
	{`+5`, 5, ""},
	{`1_000`, 1000, ""},
	{`8.0`, 8, ""},
	{`8.00`, 8, ""},
	{`8.`, 0, "int_parsing"},
	{`1.`, 0, "int_parsing"},
	{`-8.0`, -8, ""},
	{` 8.0 `, 8, ""},
	{`1_000.0`, 1000, ""},
	{`8.5`, 0, "int_parsing"},
	{`1e3`, 0, "int_parsing"},
	{`abc`, 0, "int_parsing"},
	{`1__0`, 0, "int_parsing"},
	{`_1`, 0, "int_parsing"},
	{`1_`, 0, "int_parsing"},
	{`-_1`, 0, "int_parsing"},
	{`+-1`, 0, "int_parsing"},
	{`--1`, 0, "int_parsing"},
	{`0x10`, 0, "int_parsing"},
	{`+`, 0, "int_parsing"},
	{`-`, 0, "int_parsing"},
	{``, 0, "int_parsing"},
	{` `, 0, "int_parsing"},
	{`00`, 0, ""},
	{`-0`, 0, ""},
	{`0_8`, 8, ""},
	{`٣`, 0, "int_parsing"},
	{"\t7\n", 7, ""},
	{"7\u00a0", 7, ""},
	{`9999999999999999999`, 0, "int_parsing_size"}, // pydantic keeps the big int; a Go int cannot
	{`9223372036854775807`, 9223372036854775807, ""},
	{`-9223372036854775808`, -9223372036854775808, ""},
	{`9223372036854775808`, 0, "int_parsing_size"}, // pydantic keeps the big int; a Go int cannot
	{true, 1, ""},
	{false, 0, ""},
	{big.NewInt(0), 0, ""},
	{big.NewInt(1), 1, ""},
	{big.NewInt(-7), -7, ""},
	{8.0, 8, ""},
	{8.5, 0, "int_from_float"},
	{math.Copysign(0, -1), 0, ""},
	{0.5, 0, "int_from_float"},
	{9.2e+18, 9200000000000000000, ""},
	{1e+19, 0, "int_parsing_size"},
	{-1e+19, 0, "int_parsing_size"},
	{1e+30, 0, "int_parsing_size"},
	{math.Inf(1), 0, "finite_number"},
	{math.NaN(), 0, "finite_number"},
	{nil, 0, "int_type"},
	{[]any{}, 0, "int_type"},
	{&pyjson.Dict[any]{}, 0, "int_type"},
	{bigInt("9223372036854775808"), 0, "int_parsing_size"}, // pydantic keeps the big int; a Go int cannot
}
var floatCases = []struct {
	in   any
	want float64
	typ  string
}{
	{`80`, 80.0, ""},
	{` 1.5 `, 1.5, ""},
	{`1_000`, 1000.0, ""},
	{`1_0.5`, 10.5, ""},
	{`1__0`, 0, "float_parsing"},
	{`_1`, 0, "float_parsing"},
	{`1_`, 0, "float_parsing"},
	{`-_1`, -1.0, ""},
	{`1_.0`, 1.0, ""},
	{`1.0_0`, 1.0, ""},
	{`1.00_`, 0, "float_parsing"},
	{`1e1_0`, 10000000000.0, ""},
	{`8.`, 8.0, ""},
	{`1.`, 1.0, ""},
	{`.5`, 0.5, ""},
	{`e5`, 0, "float_parsing"},
	{`1.5e`, 0, "float_parsing"},
	{`1e400`, math.Inf(1), ""},
	{`-1e400`, math.Inf(-1), ""},
	{`1e-400`, 0.0, ""},
	{`inf`, math.Inf(1), ""},
	{`-inf`, math.Inf(-1), ""},
	{`Infinity`, math.Inf(1), ""},
	{`in_f`, math.Inf(1), ""},
	{`NaN`, math.NaN(), ""},
	{`+nan`, math.NaN(), ""},
	{`-nan`, math.NaN(), ""},
	{`0x10`, 0, "float_parsing"},
	{`0x1p-2`, 0, "float_parsing"},
	{`abc`, 0, "float_parsing"},
	{``, 0, "float_parsing"},
	{` `, 0, "float_parsing"},
	{`+`, 0, "float_parsing"},
	{`٣`, 0, "float_parsing"},
	{true, 1.0, ""},
	{false, 0.0, ""},
	{big.NewInt(0), 0.0, ""},
	{big.NewInt(7), 7.0, ""},
	{2.5, 2.5, ""},
	{math.Inf(1), math.Inf(1), ""},
	{bigInt("1000000000000000000000000000000"), 1e+30, ""},
	{nil, 0, "float_type"},
	{[]any{}, 0, "float_type"},
	{&pyjson.Dict[any]{}, 0, "float_type"},
}
var boolCases = []struct {
	in   any
	want bool
	typ  string
}{
	{`YES`, true, ""},
	{`yes`, true, ""},
	{`off`, false, ""},
	{`of`, false, "bool_parsing"},
	{` true `, false, "bool_parsing"},
	{`t`, true, ""},
	{`TRUE`, true, ""},
	{`0`, false, ""},
	{`1`, true, ""},
	{`2`, false, "bool_parsing"},
	{``, false, "bool_parsing"},
	{`ＹＥＳ`, false, "bool_parsing"},
	{true, true, ""},
	{false, false, ""},
	{big.NewInt(0), false, ""},
	{big.NewInt(1), true, ""},
	{big.NewInt(2), false, "bool_parsing"},
	{big.NewInt(-1), false, "bool_parsing"},
	{bigInt("9223372036854775808"), false, "bool_type"},
	{big.NewInt(9223372036854775807), false, "bool_parsing"},
	{0.0, false, ""},
	{math.Copysign(0, -1), false, ""},
	{1.0, true, ""},
	{2.0, false, "bool_parsing"},
	{0.5, false, "bool_type"},
	{1e+19, false, "bool_type"},
	{9.2e+18, false, "bool_parsing"},
	{math.Inf(1), false, "bool_type"},
	{math.NaN(), false, "bool_type"},
	{nil, false, "bool_type"},
	{[]any{}, false, "bool_type"},
	{&pyjson.Dict[any]{}, false, "bool_type"},
}

const addrError = "5 validation errors for Addr\ncity\n  Input should be a valid string [type=string_type, input_value=12, input_type=int]\n    For further information visit https://errors.pydantic.dev/2.14/v/string_type\nzip\n  Input should be a valid string [type=string_type, input_value=['xxxxxxxxxxxxxxxxxxxxxxx...yyyyyyyyyyyyyyyyyyyyyy'], input_type=list]\n    For further information visit https://errors.pydantic.dev/2.14/v/string_type\nn\n  Input should be a valid integer, unable to parse string as an integer [type=int_parsing, input_value='8.5', input_type=str]\n    For further information visit https://errors.pydantic.dev/2.14/v/int_parsing\nf\n  Input should be a valid number [type=float_type, input_value=[], input_type=list]\n    For further information visit https://errors.pydantic.dev/2.14/v/float_type\nok\n  Input should be a valid boolean, unable to interpret input [type=bool_parsing, input_value=2.0, input_type=float]\n    For further information visit https://errors.pydantic.dev/2.14/v/bool_parsing"
const literalError = "3 validation errors for Lit\nc\n  Input should be 'business', 'economy' or 'basic_economy' [type=literal_error, input_value='first', input_type=str]\n    For further information visit https://errors.pydantic.dev/2.14/v/literal_error\nt\n  Input should be 'one_way' [type=literal_error, input_value=1, input_type=int]\n    For further information visit https://errors.pydantic.dev/2.14/v/literal_error\nu\n  Input should be 'round_trip' or 'one_way' [type=literal_error, input_value=None, input_type=NoneType]\n    For further information visit https://errors.pydantic.dev/2.14/v/literal_error"

func bigInt(s string) *big.Int {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic("bad integer " + s)
	}
	return n
}

func TestParseReprStr(t *testing.T) {
	for _, c := range reprCases {
		v, err := Parse([]byte(c.json))
		if err != nil {
			t.Errorf("Parse(%s): %v", c.json, err)
			continue
		}
		if got := Repr(v); got != c.repr {
			t.Errorf("repr(%s) = %s, want %s", c.json, got, c.repr)
		}
		if got := Str(v); got != c.str {
			t.Errorf("str(%s) = %q, want %q", c.json, got, c.str)
		}
		if got := Type(v); got != c.typ {
			t.Errorf("type(%s) = %s, want %s", c.json, got, c.typ)
		}
	}
}

func TestParseInvalid(t *testing.T) {
	for _, raw := range []string{``, `{`, `[1,`, `{"a" 1}`, `nul`} {
		if v, err := Parse([]byte(raw)); err == nil {
			t.Errorf("Parse(%q) = %#v, want an error", raw, v)
		}
	}
}

func TestArg(t *testing.T) {
	args := map[string]json.RawMessage{"id": json.RawMessage(`"C1"`), "bad": json.RawMessage(`{`)}
	if v, err := Arg(args, "id"); err != nil || v != "C1" {
		t.Errorf("Arg(id) = %#v, %v", v, err)
	}
	if v, err := Arg(args, "absent"); err != nil || v != nil {
		t.Errorf("Arg(absent) = %#v, %v; want None", v, err)
	}
	if _, err := Arg(args, "bad"); err == nil || !strings.HasPrefix(err.Error(), "argument bad: {: not JSON") {
		t.Errorf("Arg(bad) error = %v", err)
	}
}

// TestOrdered: keys keep their order and numbers their text, so a
// document re-encodes as it was.
func TestOrdered(t *testing.T) {
	const doc = `{"z":1.50,"a":[1e2,{"y":null,"b":-0}],"m":"x"}`
	v, err := Ordered([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	d := v.(*pyjson.Dict[any])
	if got := strings.Join(d.Keys(), ","); got != "z,a,m" {
		t.Errorf("keys %s, want z,a,m", got)
	}
	if z, _ := d.Get("z"); z != json.Number("1.50") {
		t.Errorf("z = %#v, want json.Number 1.50", z)
	}
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != doc {
		t.Errorf("re-encoded %s, want %s", out, doc)
	}
}

func TestStrKey(t *testing.T) {
	for _, c := range []struct {
		json, key string
		ok        bool
		err       string
	}{
		{`"O1"`, "O1", true, ""},
		{`12`, "", false, ""},
		{`null`, "", false, ""},
		{`1.5`, "", false, ""},
		{`["O1"]`, "", false, "unhashable type: 'list'"},
		{`{"a": 1}`, "", false, "unhashable type: 'dict'"},
	} {
		v, _ := Parse([]byte(c.json))
		key, ok, err := StrKey(v)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if key != c.key || ok != c.ok || gotErr != c.err {
			t.Errorf("StrKey(%s) = %q, %v, %q; want %q, %v, %q", c.json, key, ok, gotErr, c.key, c.ok, c.err)
		}
	}
}

func TestInputRepr(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{strings.Repeat("y", 48), "'" + strings.Repeat("y", 48) + "'"},
		{strings.Repeat("y", 49), "'" + strings.Repeat("y", 24) + "..." + strings.Repeat("y", 23) + "'"},
		// pydantic-core counts bytes, and cuts at character boundaries.
		{strings.Repeat("é", 24), "'" + strings.Repeat("é", 24) + "'"},
		{strings.Repeat("é", 25), "'éééééééééééé...ééééééééééé'"},
		{"a" + strings.Repeat("é", 60), "'aééééééééééé...ééééééééééé'"},
		{strings.Repeat("é", 60) + "a", "'éééééééééééé...éééééééééééa'"},
		{"ab" + strings.Repeat("😀", 20) + "b", "'ab😀😀😀😀😀...😀😀😀😀😀b'"},
		{"abc" + strings.Repeat("😀", 20) + "bc", "'abc😀😀😀😀😀...😀😀😀😀😀bc'"},
	} {
		if got := InputRepr(c.in); got != c.want {
			t.Errorf("InputRepr(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestLaxScalars(t *testing.T) {
	for _, c := range intCases {
		got, typ := laxInt(c.in)
		if got != c.want || typ != c.typ {
			t.Errorf("int field %s = %d, %q; want %d, %q", Repr(c.in), got, typ, c.want, c.typ)
		}
	}
	for _, c := range floatCases {
		got, typ := laxFloat(c.in)
		same := got == c.want || math.IsNaN(got) && math.IsNaN(c.want)
		if !same || typ != c.typ {
			t.Errorf("float field %s = %v, %q; want %v, %q", Repr(c.in), got, typ, c.want, c.typ)
		}
	}
	for _, c := range boolCases {
		got, typ := laxBool(c.in)
		if got != c.want || typ != c.typ {
			t.Errorf("bool field %s = %v, %q; want %v, %q", Repr(c.in), got, typ, c.want, c.typ)
		}
	}
}

func TestValidationError(t *testing.T) {
	ve := ValidationError{Model: "Addr"}
	ve.Str("city", big.NewInt(12))
	ve.Str("zip", []any{strings.Repeat("x", 30), strings.Repeat("y", 30)})
	ve.Int("n", "8.5")
	ve.Float("f", []any{})
	ve.Bool("ok", 2.0)
	if got := ve.Error(); got != addrError {
		t.Errorf("got\n%s\nwant\n%s", got, addrError)
	}

	lit := ValidationError{Model: "Lit"}
	if got := lit.Literal("c", "economy", "business", "economy", "basic_economy"); got != "economy" || lit.Err() != nil {
		t.Fatalf("Literal(economy) = %q, %v", got, lit.Err())
	}
	lit.Literal("c", "first", "business", "economy", "basic_economy")
	lit.Literal("t", big.NewInt(1), "one_way")
	lit.Literal("u", nil, "round_trip", "one_way")
	if got := lit.Err().Error(); got != literalError {
		t.Errorf("got\n%s\nwant\n%s", got, literalError)
	}
}
