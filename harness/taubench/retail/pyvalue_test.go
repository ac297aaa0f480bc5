package retail

import (
	"encoding/json"
	"testing"
)

func TestPyRepr(t *testing.T) {
	for _, c := range []struct{ json, repr string }{
		{`"it's"`, `"it's"`}, {`"a'b\"c"`, `'a\'b"c'`}, {`[1, "a", null, true, 2.5]`, `[1, 'a', None, True, 2.5]`},
		{`{"b": 1, "a": [false]}`, `{'b': 1, 'a': [False]}`}, {`-0`, `0`}, {`1e400`, `inf`}, {`1E2`, `100.0`},
	} {
		v, err := parseValue(json.RawMessage(c.json))
		if err != nil {
			t.Fatal(err)
		}
		if got := pyRepr(v); got != c.repr {
			t.Errorf("repr(%s) = %s, want %s", c.json, got, c.repr)
		}
	}
}
