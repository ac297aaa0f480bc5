package pycalc

import (
	"math"
	"strings"
	"testing"
)

// calcCases are what CPython 3.11 answers for tau2's calculate (its
// result, or the text of what it raised), recorded by running tau2's
// expression code on each.
var calcCases = []struct{ expr, want, err string }{
	{"2 + 2", "4.0", ""},
	{"100/3", "33.33", ""},
	{"2 ** 0.5", "1.41", ""},
	{"-7//2", "-4.0", ""},
	{"-5.5 // 2", "-3.0", ""},
	{"0.125", "0.12", ""},
	{"2.675", "2.67", ""},
	{"99.995", "100.0", ""},
	{" 10 - 3", "7.0", ""},
	{"10**20", "1e+20", ""},
	{"2 ** 1000", "1.0715086071862673e+301", ""},
	{"10.0**308*10", "inf", ""},
	{"10.0**308*10 - 10.0**308*10", "nan", ""},
	{"-0.0", "-0.0", ""},
	{"00", "0.0", ""},
	{"1.", "1.0", ""},
	{".5", "0.5", ""},
	{"2 ** -1", "0.5", ""},
	{"-2 ** 2", "-4.0", ""},
	{"+-+3", "-3.0", ""},
	{"12345678901234567890 * 98765432109876543210", "1.219326311370218e+39", ""},
	{"10**400 // 10**399", "10.0", ""},
	{"", "", "invalid syntax (<string>, line 0)"},
	{"   ", "", "invalid syntax (<string>, line 0)"},
	{"2 +", "", "invalid syntax (<string>, line 1)"},
	{"(1+2", "", "'(' was never closed (<string>, line 1)"},
	{"1 2", "", "invalid syntax (<string>, line 1)"},
	{"(1 2)", "", "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)"},
	{"(1 2", "", "'(' was never closed (<string>, line 1)"},
	{"1 2 (", "", "'(' was never closed (<string>, line 1)"},
	{"(1 2 3", "", "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)"},
	{"1 2 3 (", "", "invalid syntax (<string>, line 1)"},
	{"01", "", "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)"},
	{"01 )", "", "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)"},
	{") 01", "", "unmatched ')' (<string>, line 1)"},
	{"1 + (2 * (3 4))", "", "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)"},
	{"(1 +)", "", "invalid syntax (<string>, line 1)"},
	{"1..2", "", "invalid syntax (<string>, line 1)"},
	{"(1..", "", "'(' was never closed (<string>, line 1)"},
	{"(1.2.3)", "", "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)"},
	{"()", "", "float() argument must be a string or a real number, not 'tuple'"},
	{"2(3)", "", "'int' object is not callable"},
	{"()()", "", "'tuple' object is not callable"},
	{"2 (1/0)", "", "division by zero"},
	{"1 + ()", "", "unsupported operand type(s) for +: 'int' and 'tuple'"},
	{"() + 1", "", "can only concatenate tuple (not \"int\") to tuple"},
	{"() * 2.0", "", "can't multiply sequence by non-int of type 'float'"},
	{"() * 3", "", "float() argument must be a string or a real number, not 'tuple'"},
	{"-()", "", "bad operand type for unary -: 'tuple'"},
	{"1/0", "", "division by zero"},
	{"1.0/0", "", "float division by zero"},
	{"1//0", "", "integer division or modulo by zero"},
	{"1.0//0", "", "float floor division by zero"},
	{"0 ** -1", "", "0.0 cannot be raised to a negative power"},
	{"(-8)**0.5", "", "float() argument must be a string or a real number, not 'complex'"},
	{"(-1)**0.5 / 0", "", "complex division by zero"},
	{"(-8)**0.5 // 2", "", "unsupported operand type(s) for //: 'complex' and 'int'"},
	{"10**400", "", "int too large to convert to float"},
	{"10.0**400", "", "(34, 'Numerical result out of range')"},
	{"10**400 / 10**399", "10.0", ""},
	{"1e5", "", "Invalid characters in expression"},
	{"2 % 3", "", "Invalid characters in expression"},
	{"...", "", "float() argument must be a string or a real number, not 'ellipsis'"},
	{"1 + ...", "", "unsupported operand type(s) for +: 'int' and 'ellipsis'"},
	{"() + ...", "", "can only concatenate tuple (not \"ellipsis\") to tuple"},
	{"() * ...", "", "can't multiply sequence by non-int of type 'ellipsis'"},
	{"... * 2", "", "unsupported operand type(s) for *: 'ellipsis' and 'int'"},
	{"-...", "", "bad operand type for unary -: 'ellipsis'"},
	{"...()", "", "'ellipsis' object is not callable"},
	{"....", "", "invalid syntax (<string>, line 1)"},
	{"1....", "", "invalid syntax (<string>, line 1)"},
	{"(1 ...)", "", "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)"},
	{"(... 1)", "", "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)"},
}

func TestCalculate(t *testing.T) {
	for _, c := range calcCases {
		got, err := Calculate(c.expr)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != c.want || gotErr != c.err {
			t.Errorf("Calculate(%q) = %q, %q; CPython: %q, %q", c.expr, got, gotErr, c.want, c.err)
		}
	}
}

func TestRound(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{0.125, 0.12}, {0.375, 0.38}, {2.675, 2.67}, {-0.005, -0.01}, {1e300, 1e300},
		{math.Copysign(0, -1), math.Copysign(0, -1)}, {30.0 - 12.16, 17.84}, {49 + 4079.45, 4128.45},
	} {
		if got := Round(c.in, 2); got != c.want || math.Signbit(got) != math.Signbit(c.want) {
			t.Errorf("Round(%v, 2) = %v, want %v", c.in, got, c.want)
		}
	}
}

// The cases recorded for the airline port, which shares the tool.
func TestCalculateAirlineCases(t *testing.T) {
	for _, c := range []struct{ expr, want, err string }{
		{"2 + 2", "4.0", ""},
		{"2.675 * 1", "2.67", ""},
		{"0.125 + 0", "0.12", ""},
		{"0.375 * 1", "0.38", ""},
		{"1.005 * 1000 / 1000", "1.0", ""},
		{"1e5", "", "Invalid characters in expression"},
		{"(1 2)", "", "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)"},
		{"((1 2)", "", "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)"},
		{"(1 2", "", "'(' was never closed (<string>, line 1)"},
		{"2 3 (", "", "'(' was never closed (<string>, line 1)"},
		{"1)", "", "unmatched ')' (<string>, line 1)"},
		{"01", "", "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)"},
		{"()", "", "float() argument must be a string or a real number, not 'tuple'"},
		{"(2)(3)", "", "'int' object is not callable"},
		{"(-8)**0.5", "", "float() argument must be a string or a real number, not 'complex'"},
		{"2**-1", "0.5", ""},
		{"-7.5//2", "-4.0", ""},
		{"7.5//-2", "-4.0", ""},
		{"-7//2", "-4.0", ""},
		{"10**20/3", "3.333333333333333e+19", ""},
		{"10**400/1", "", "integer division result too large for a float"},
		{"10.0**400", "", "(34, 'Numerical result out of range')"},
		{"1/0", "", "division by zero"},
		{"1.0//0", "", "float floor division by zero"},
		{"0**-1", "", "0.0 cannot be raised to a negative power"},
		{"2**100", "1.2676506002282294e+30", ""},
		{"(1250 - 1000) * 0.9", "225.0", ""},
		{"342.81 + 17.19", "360.0", ""},
		{"1286 / 3", "428.67", ""},
		{"99999999999999999999 / 7", "1.4285714285714287e+19", ""},
		{"1.1 * 1.1", "1.21", ""},
		{"3 * 0.1", "0.3", ""},
		{"2 ** 0.5 ** 2", "1.19", ""},
		{"-(2) ** 2", "-4.0", ""},
		{"5 // 0.3", "16.0", ""},
		{"-0.0", "-0.0", ""},
		{"1 - 1.0", "0.0", ""},
	} {
		got, err := Calculate(c.expr)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != c.want || gotErr != c.err {
			t.Errorf("calculate(%q) = %q, %q; want %q, %q", c.expr, got, gotErr, c.want, c.err)
		}
	}
}

// The limits: CPython's where it has them (its texts recorded from 3.11),
// and bounds on one call's work where it has none. Each answers at once.
func TestLimits(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("(", n) + "1" + strings.Repeat(")", n) }
	digits := "Exceeds the limit (4300 digits) for integer string conversion: value has 4301 digits; use sys.set_int_max_str_digits() to increase the limit - Consider hexadecimal for huge integer literals to avoid decimal conversion limits. (<string>, line 1)"
	for _, c := range []struct{ name, expr, want, err string }{
		{"200 parentheses", nest(200), "1.0", ""},
		{"201 parentheses", nest(201), "", "too many nested parentheses (<string>, line 1)"},
		{"40,000 parentheses", nest(40_000), "", "too many nested parentheses (<string>, line 1)"},
		{"4300 digits", strings.Repeat("9", 4300) + "//" + strings.Repeat("9", 4300), "1.0", ""},
		{"4301 digits", strings.Repeat("9", 4301), "", digits},
		{"2993 unary minus", strings.Repeat("-", 2993) + "1", "-1.0", ""},
		{"2994 unary minus", strings.Repeat("-", 2994) + "1", "", "maximum recursion depth exceeded during compilation"},
		{"a huge product", strings.Repeat("(10**4000)*", 200) + "1", "", "int too large to convert to float"},
		{"a huge power", "9**9**9", "", "int too large to convert to float"},
		{"too long", strings.Repeat("1+", 50_001) + "1", "", "the expression is 100003 characters long; calculate takes at most 100000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Calculate(c.expr)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != c.want || gotErr != c.err {
				t.Errorf("got %q, %q; want %q, %q", got, gotErr, c.want, c.err)
			}
		})
	}
}
