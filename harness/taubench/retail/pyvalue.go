package retail

import (
	"fmt"

	"evals.si/harness/taubench/pyjson"
	"evals.si/harness/taubench/pyvalue"
)

// tau2 passes a tool call's JSON arguments to the Python method unchecked,
// so an argument of the wrong type meets whatever Python does with it:
// a number where an id is wanted is just not found, a list is unhashable,
// a string where a list is wanted is iterated by character. The values
// are pyvalue.Parse's; these helpers are the Python operations the retail
// tools apply to them.

// iterList iterates v as `for x in v` does, for a list argument: a
// list gives its elements, a string its characters. Other values are not
// iterable (a dict, which would give its keys, is refused plainly: no
// model sends one).
func iterList(name string, v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case string:
		out := make([]any, 0, len(x))
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case *pyjson.Dict[any]:
		return nil, fmt.Errorf("argument %s: a list of item ids is wanted, not a JSON object", name)
	}
	return nil, fmt.Errorf("'%s' object is not iterable", pyvalue.Type(v))
}

// pyLen is len(v) for a list argument.
func pyLen(v any) (int, error) {
	switch x := v.(type) {
	case []any:
		return len(x), nil
	case string:
		return len([]rune(x)), nil
	case *pyjson.Dict[any]:
		return x.Len(), nil
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", pyvalue.Type(v))
}

// countStr counts the elements of list equal to s (only strings equal a
// string).
func countStr(list []any, s string) int {
	n := 0
	for _, e := range list {
		if x, ok := e.(string); ok && x == s {
			n++
		}
	}
	return n
}
