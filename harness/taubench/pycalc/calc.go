// Package pycalc is tau2's calculate tool (GenericToolKit.calculate, which
// the airline and retail toolkits share): Python's eval of an arithmetic
// expression, as CPython evaluates it, rounded to two decimals.
package pycalc

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/cmplx"
	"strconv"
	"strings"

	"evals.si/harness/taubench/pyjson"
)

// Calculate is tau2's calculate tool:
//
//	str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
//
// after checking that expression only has digits, + - * / ( ) . and
// spaces. With those characters eval reads Python number literals, the
// arithmetic operators (** and // too), parentheses and, through
// adjacent parentheses, calls; so this evaluates that subset of Python
// as CPython does: unbounded ints, float and complex results, the empty
// tuple "()", and CPython's exception texts.
func Calculate(expression string) (string, error) {
	if len(expression) > maxExpression {
		// Not CPython's: a bound on the work one call may ask for.
		return "", fmt.Errorf("the expression is %d characters long; calculate takes at most %d", len(expression), maxExpression)
	}
	for _, r := range expression {
		if !strings.ContainsRune("0123456789+-*/(). ", r) {
			return "", errors.New("Invalid characters in expression")
		}
	}
	toks, err := tokenize(expression)
	if err != nil {
		return "", err
	}
	p := &parser{toks: toks}
	n, ok := p.parse()
	if p.err != nil {
		return "", p.err
	}
	if !ok {
		return "", p.syntaxError()
	}
	v, err := n.eval()
	if err != nil {
		return "", err
	}
	f, err := toFloat(v)
	if err != nil {
		return "", err
	}
	return FloatStr(Round(f, 2)), nil
}

// Round is Python's round(f, ndigits) for a float: correctly rounded
// to ndigits decimals (ties to even on the exact binary value), which
// strconv's exact formatting also gives.
func Round(f float64, ndigits int) float64 {
	if math.IsInf(f, 0) || math.IsNaN(f) || f == 0 {
		return f
	}
	r, err := strconv.ParseFloat(strconv.FormatFloat(f, 'f', ndigits, 64), 64)
	if err != nil {
		return f
	}
	return r
}

// syntaxErr is str(SyntaxError) for eval's "<string>" source.
func syntaxErr(msg string, line int) error {
	return fmt.Errorf("%s (<string>, line %d)", msg, line)
}

// Tokens.
type tokKind int

const (
	tNum tokKind = iota
	tOp          // + - * / ** //
	tLParen
	tRParen
	tDot
	tEllipsis
	tEOF
)

type token struct {
	kind  tokKind
	text  string
	level int // parenthesis depth before the token
}

// tokenize splits the expression as CPython's tokenizer does, with its
// errors: a decimal integer literal with leading zeros, and a ')' that
// closes nothing. eval strips leading spaces first; a blank source has no
// line 1.
func tokenize(s string) ([]token, error) {
	s = strings.TrimLeft(s, " ")
	if strings.TrimSpace(s) == "" {
		return nil, syntaxErr("invalid syntax", 0)
	}
	var toks []token
	level := 0
	isDigit := func(i int) bool { return i < len(s) && s[i] >= '0' && s[i] <= '9' }
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ':
			i++
		case isDigit(i) || (c == '.' && isDigit(i+1)):
			j := i
			for isDigit(j) {
				j++
			}
			float := false
			if j < len(s) && s[j] == '.' {
				float = true
				j++
				for isDigit(j) {
					j++
				}
			}
			text := s[i:j]
			if !float && len(text) > maxDigits {
				return nil, syntaxErr(fmt.Sprintf("Exceeds the limit (%d digits) for integer string conversion: value has %d digits; use sys.set_int_max_str_digits() to increase the limit - Consider hexadecimal for huge integer literals to avoid decimal conversion limits.", maxDigits, len(text)), 1)
			}
			if !float && len(text) > 1 && text[0] == '0' && strings.Trim(text, "0") != "" {
				return nil, syntaxErr("leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers", 1)
			}
			toks = append(toks, token{tNum, text, level})
			i = j
		case strings.HasPrefix(s[i:], "..."):
			toks = append(toks, token{tEllipsis, "...", level})
			i += 3
		case c == '.':
			toks = append(toks, token{tDot, ".", level})
			i++
		case c == '(':
			if level >= maxLevel {
				return nil, syntaxErr("too many nested parentheses", 1)
			}
			toks = append(toks, token{tLParen, "(", level})
			level++
			i++
		case c == ')':
			if level == 0 {
				return nil, syntaxErr("unmatched ')'", 1)
			}
			level--
			toks = append(toks, token{tRParen, ")", level})
			i++
		default: // + - * /
			op := string(c)
			if (c == '*' || c == '/') && i+1 < len(s) && s[i+1] == c {
				op += op
			}
			toks = append(toks, token{tOp, op, level})
			i += len(op)
		}
	}
	toks = append(toks, token{tEOF, "", level})
	return toks, nil
}

// parser is a recursive-descent parser of Python's expression grammar
// restricted to the tokens above:
//
//	sum    = term (("+" | "-") term)*
//	term   = factor (("*" | "/" | "//") factor)*
//	factor = ("+" | "-") factor | power
//	power  = primary ["**" factor]
//	primary = atom ("(" [sum] ")")*      (a call)
//	atom   = NUMBER | "..." | "(" [sum] ")"  ("()" is the empty tuple)
//
// A dot after a primary starts an attribute reference, which needs a
// name: never valid here.
type parser struct {
	toks []token
	pos  int
	// fail is the position of the token the parse failed at.
	fail int
	// unary counts the unary operators being parsed; past maxUnary,
	// CPython's compiler gives up (err).
	unary int
	err   error
}

func (p *parser) peek() token { return p.toks[p.pos] }

func (p *parser) parse() (node, bool) {
	n, ok := p.sum()
	if !ok {
		return nil, false
	}
	if p.peek().kind != tEOF {
		p.fail = p.pos
		return nil, false
	}
	return n, true
}

func (p *parser) isOp(ops ...string) bool {
	t := p.peek()
	if t.kind != tOp {
		return false
	}
	for _, o := range ops {
		if t.text == o {
			return true
		}
	}
	return false
}

func (p *parser) sum() (node, bool) {
	left, ok := p.term()
	for ok && p.isOp("+", "-") {
		op := p.toks[p.pos].text
		p.pos++
		var right node
		if right, ok = p.term(); ok {
			left = binary{op, left, right}
		}
	}
	return left, ok
}

func (p *parser) term() (node, bool) {
	left, ok := p.factor()
	for ok && p.isOp("*", "/", "//") {
		op := p.toks[p.pos].text
		p.pos++
		var right node
		if right, ok = p.factor(); ok {
			left = binary{op, left, right}
		}
	}
	return left, ok
}

func (p *parser) factor() (node, bool) {
	if p.isOp("+", "-") {
		if p.unary++; p.unary > maxUnary {
			p.err = errors.New("maximum recursion depth exceeded during compilation")
			return nil, false
		}
		defer func() { p.unary-- }()
		op := p.toks[p.pos].text
		p.pos++
		x, ok := p.factor()
		return unary{op, x}, ok
	}
	return p.power()
}

func (p *parser) power() (node, bool) {
	base, ok := p.primary()
	if ok && p.isOp("**") {
		p.pos++
		var exp node
		if exp, ok = p.factor(); ok {
			return binary{"**", base, exp}, true
		}
	}
	return base, ok
}

func (p *parser) primary() (node, bool) {
	n, ok := p.atom()
	for ok {
		switch p.peek().kind {
		case tLParen:
			p.pos++
			c := call{fn: n}
			if p.peek().kind != tRParen {
				var a node
				if a, ok = p.sum(); !ok {
					return nil, false
				}
				c.arg = a
			}
			if p.peek().kind != tRParen {
				p.fail = p.pos
				return nil, false
			}
			p.pos++
			n = c
		case tDot:
			p.pos++
			p.fail = p.pos // no name can follow
			return nil, false
		default:
			return n, true
		}
	}
	return nil, false
}

func (p *parser) atom() (node, bool) {
	t := p.peek()
	switch t.kind {
	case tNum:
		p.pos++
		return number(t.text), true
	case tEllipsis:
		p.pos++
		return ellipsis{}, true
	case tLParen:
		p.pos++
		if p.peek().kind == tRParen {
			p.pos++
			return tuple{}, true
		}
		n, ok := p.sum()
		if !ok {
			return nil, false
		}
		if p.peek().kind != tRParen {
			p.fail = p.pos
			return nil, false
		}
		p.pos++
		return n, true
	}
	p.fail = p.pos
	return nil, false
}

// syntaxError is the SyntaxError CPython reports for a parse that failed
// at p.fail. Reaching the end inside parentheses is "'(' was never
// closed". A number (or "...") right after a complete expression is tried as a
// second expression, as CPython's error pass does: if that reads up to
// the end inside parentheses the parentheses are reported; inside
// parentheses the two get the hint about a comma. Anything else is plain
// "invalid syntax".
func (p *parser) syntaxError() error {
	t := p.toks[p.fail]
	if t.kind == tEOF {
		if t.level > 0 {
			return syntaxErr("'(' was never closed", 1)
		}
		return syntaxErr("invalid syntax", 1)
	}
	if (t.kind == tNum || t.kind == tEllipsis) && p.fail > 0 && endsExpr(p.toks[p.fail-1]) {
		q := &parser{toks: p.toks, pos: p.fail}
		_, ok := q.sum()
		reached := q.fail
		if ok {
			reached = q.pos
		}
		if end := q.toks[reached]; end.kind == tEOF && end.level > 0 {
			return syntaxErr("'(' was never closed", 1)
		}
		if t.level > 0 {
			return syntaxErr("invalid syntax. Perhaps you forgot a comma?", 1)
		}
	}
	return syntaxErr("invalid syntax", 1)
}

func endsExpr(t token) bool { return t.kind == tNum || t.kind == tEllipsis || t.kind == tRParen }

// Values: *big.Int (int), float64, complex128, tuple (only the empty
// one can be written here) and ellipsis (Python's Ellipsis, "...").
type value = any

type node interface{ eval() (value, error) }

type number string
type tuple struct{}
type ellipsis struct{}
type unary struct {
	op string
	x  node
}
type binary struct {
	op   string
	x, y node
}
type call struct {
	fn  node
	arg node // nil: no argument
}

func (n number) eval() (value, error) {
	if strings.Contains(string(n), ".") {
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil && !math.IsInf(f, 0) {
			return nil, err
		}
		return f, nil
	}
	i, _ := new(big.Int).SetString(string(n), 10)
	return i, nil
}

func (tuple) eval() (value, error)    { return tuple{}, nil }
func (ellipsis) eval() (value, error) { return ellipsis{}, nil }

func (c call) eval() (value, error) {
	fn, err := c.fn.eval()
	if err != nil {
		return nil, err
	}
	if c.arg != nil {
		if _, err := c.arg.eval(); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("'%s' object is not callable", typeName(fn))
}

func typeName(v value) string {
	switch v.(type) {
	case *big.Int:
		return "int"
	case float64:
		return "float"
	case complex128:
		return "complex"
	case ellipsis:
		return "ellipsis"
	}
	return "tuple"
}

func (u unary) eval() (value, error) {
	x, err := u.x.eval()
	if err != nil {
		return nil, err
	}
	neg := u.op == "-"
	switch v := x.(type) {
	case *big.Int:
		if neg {
			return new(big.Int).Neg(v), nil
		}
		return v, nil
	case float64:
		if neg {
			return -v, nil
		}
		return v, nil
	case complex128:
		if neg {
			return -v, nil
		}
		return v, nil
	}
	return nil, fmt.Errorf("bad operand type for unary %s: '%s'", u.op, typeName(x))
}

func (b binary) eval() (value, error) {
	x, err := b.x.eval()
	if err != nil {
		return nil, err
	}
	y, err := b.y.eval()
	if err != nil {
		return nil, err
	}
	return apply(b.op, x, y)
}

// toFloat is float(v).
func toFloat(v value) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		if math.IsInf(f, 0) {
			return 0, errors.New("int too large to convert to float")
		}
		return f, nil
	}
	return 0, fmt.Errorf("float() argument must be a string or a real number, not '%s'", typeName(v))
}

func unsupported(op string, x, y value) error {
	if op == "**" {
		op = "** or pow()"
	}
	return fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(x), typeName(y))
}

// Limits. CPython's: maxLevel parentheses (its tokenizer's MAXLEVEL),
// maxDigits in an int literal (sys.int_info.default_max_str_digits),
// maxUnary operators in a row (where 3.11's compiler runs out of
// recursion). Not CPython's, which would grind through 9**9**9 or a
// megabyte of multiplications: maxIntBits bounds every int an operation
// builds (refused as too large for the float it must become), and
// maxExpression the text, so one call's work is bounded.
const (
	maxLevel      = 200
	maxDigits     = 4300
	maxUnary      = 2993
	maxIntBits    = 1 << 17
	maxExpression = 100_000
)

func apply(op string, x, y value) (value, error) {
	_, xt := x.(tuple)
	_, yt := y.(tuple)
	if xt || yt {
		return tupleOp(op, x, y)
	}
	_, xe := x.(ellipsis)
	_, ye := y.(ellipsis)
	if xe || ye {
		return nil, unsupported(op, x, y)
	}
	xi, xInt := x.(*big.Int)
	yi, yInt := y.(*big.Int)
	if xInt && yInt {
		return intOp(op, xi, yi)
	}
	_, xc := x.(complex128)
	_, yc := y.(complex128)
	if xc || yc {
		return complexOp(op, x, y)
	}
	xf, err := toFloat(x)
	if err != nil {
		return nil, err
	}
	yf, err := toFloat(y)
	if err != nil {
		return nil, err
	}
	return floatOp(op, xf, yf)
}

// tupleOp is an operator with a tuple operand: the numeric operators
// decline, then the left operand's concatenation (for +) or either
// operand's repetition (for *) is tried, as CPython's binary operators
// fall back to the sequence methods.
func tupleOp(op string, x, y value) (value, error) {
	_, xt := x.(tuple)
	_, yt := y.(tuple)
	switch {
	case op == "+" && xt:
		if !yt {
			return nil, fmt.Errorf("can only concatenate tuple (not \"%s\") to tuple", typeName(y))
		}
		return tuple{}, nil
	case op == "*":
		other := y
		if !xt {
			other = x
		}
		n, ok := other.(*big.Int)
		if !ok {
			return nil, fmt.Errorf("can't multiply sequence by non-int of type '%s'", typeName(other))
		}
		if !n.IsInt64() {
			return nil, fmt.Errorf("cannot fit 'int' into an index-sized integer")
		}
		return tuple{}, nil
	}
	return nil, unsupported(op, x, y)
}

func intOp(op string, x, y *big.Int) (value, error) {
	switch op {
	case "+":
		return new(big.Int).Add(x, y), nil
	case "-":
		return new(big.Int).Sub(x, y), nil
	case "*":
		if x.BitLen()+y.BitLen() > maxIntBits {
			return nil, errors.New("int too large to convert to float")
		}
		return new(big.Int).Mul(x, y), nil
	case "/":
		if y.Sign() == 0 {
			return nil, errors.New("division by zero")
		}
		f, _ := new(big.Rat).SetFrac(x, y).Float64()
		if math.IsInf(f, 0) {
			return nil, errors.New("integer division result too large for a float")
		}
		return f, nil
	case "//":
		if y.Sign() == 0 {
			return nil, errors.New("integer division or modulo by zero")
		}
		q, m := new(big.Int).QuoRem(x, y, new(big.Int))
		if m.Sign() != 0 && (m.Sign() < 0) != (y.Sign() < 0) {
			q.Sub(q, big.NewInt(1))
		}
		return q, nil
	}
	// **
	if y.Sign() < 0 {
		xf, err := toFloat(x)
		if err != nil {
			return nil, err
		}
		yf, err := toFloat(y)
		if err != nil {
			return nil, err
		}
		return floatPow(xf, yf)
	}
	if x.BitLen() > 1 && (!y.IsInt64() || int64(x.BitLen()-1)*y.Int64() > maxIntBits) {
		return nil, errors.New("int too large to convert to float")
	}
	return new(big.Int).Exp(x, y, nil), nil
}

func floatOp(op string, x, y float64) (value, error) {
	switch op {
	case "+":
		return float64(x + y), nil
	case "-":
		return float64(x - y), nil
	case "*":
		return float64(x * y), nil
	case "/":
		if y == 0 {
			return nil, errors.New("float division by zero")
		}
		return float64(x / y), nil
	case "//":
		if y == 0 {
			return nil, errors.New("float floor division by zero")
		}
		return floorDiv(x, y), nil
	}
	return floatPow(x, y)
}

// floorDiv is CPython's float_floor_div (through float_divmod).
func floorDiv(vx, wx float64) float64 {
	mod := math.Mod(vx, wx)
	div := (vx - mod) / wx
	if mod != 0 {
		if (wx < 0) != (mod < 0) {
			div -= 1.0
		}
	}
	if div != 0 {
		floordiv := math.Floor(div)
		if div-floordiv > 0.5 {
			floordiv += 1.0
		}
		return floordiv
	}
	return math.Copysign(0, vx/wx)
}

func isOddInteger(f float64) bool {
	return math.Mod(math.Abs(f), 2.0) == 1.0
}

// floatPow is CPython's float_pow.
func floatPow(iv, iw float64) (value, error) {
	switch {
	case iw == 0:
		return 1.0, nil
	case math.IsNaN(iv):
		return iv, nil
	case math.IsNaN(iw):
		if iv == 1.0 {
			return 1.0, nil
		}
		return iw, nil
	case math.IsInf(iw, 0):
		iv = math.Abs(iv)
		if iv == 1.0 {
			return 1.0, nil
		}
		if (iw > 0) == (iv > 1.0) {
			return math.Abs(iw), nil
		}
		return 0.0, nil
	case math.IsInf(iv, 0):
		odd := isOddInteger(iw)
		if iw > 0 {
			if odd {
				return iv, nil
			}
			return math.Abs(iv), nil
		}
		if odd {
			return math.Copysign(0, iv), nil
		}
		return 0.0, nil
	case iv == 0:
		if iw < 0 {
			return nil, errors.New("0.0 cannot be raised to a negative power")
		}
		if isOddInteger(iw) {
			return iv, nil
		}
		return 0.0, nil
	}
	negate := false
	if iv < 0 {
		if iw != math.Floor(iw) {
			// A negative number to a fractional power is complex.
			return complexPow(complex(iv, 0), complex(iw, 0))
		}
		iv = -iv
		negate = isOddInteger(iw)
	}
	if iv == 1.0 {
		if negate {
			return -1.0, nil
		}
		return 1.0, nil
	}
	ix := math.Pow(iv, iw)
	if math.IsInf(ix, 0) {
		return nil, errors.New("(34, 'Numerical result out of range')")
	}
	if negate {
		ix = -ix
	}
	return ix, nil
}

func toComplex(v value) (complex128, error) {
	if c, ok := v.(complex128); ok {
		return c, nil
	}
	f, err := toFloat(v)
	return complex(f, 0), err
}

func complexOp(op string, x, y value) (value, error) {
	if op == "//" {
		return nil, unsupported(op, x, y)
	}
	a, err := toComplex(x)
	if err != nil {
		return nil, err
	}
	b, err := toComplex(y)
	if err != nil {
		return nil, err
	}
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, errors.New("complex division by zero")
		}
		return a / b, nil
	}
	return complexPow(a, b)
}

// complexPow is CPython's complex power, whose value matters here only
// for the errors: its result is never a float.
func complexPow(a, b complex128) (value, error) {
	if b == 0 {
		return complex(1, 0), nil
	}
	if a == 0 {
		if imag(b) != 0 || real(b) < 0 {
			return nil, errors.New("0.0 to a negative or complex power")
		}
		return complex(0, 0), nil
	}
	r := cmplx.Pow(a, b)
	if cmplx.IsInf(r) {
		return nil, errors.New("complex exponentiation")
	}
	return r, nil
}

// FloatStr is str(float): repr, with Python's spellings of the
// infinities and NaN.
func FloatStr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return pyjson.FloatRepr(f)
}
