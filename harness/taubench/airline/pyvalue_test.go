package airline

import "testing"

func TestPyRepr(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`"it's"`, `"it's"`},
		{`"a\"b'c"`, `'a"b\'c'`},
		{`{"a": [1, 2.0, true, null], "b": "x\ny"}`, `{'a': [1, 2.0, True, None], 'b': 'x\ny'}`},
		{`1e3`, `1000.0`},
	} {
		if got := pyRepr([]byte(c.in)); got != c.want {
			t.Errorf("pyRepr(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	long := "{'id': 'credit_card_1234567890123', 'amount': 100, 'foo': 'a long string here for truncation purposes'}"
	if got, want := truncRepr(long), "{'id': 'credit_card_12345...or truncation purposes'}"; got != want {
		t.Errorf("truncRepr = %s, want %s", got, want)
	}
}
