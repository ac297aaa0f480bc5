// Go tests, run as SWE-bench runs its Go repos: go test -v -run '^(...)$' ./...
package calc

import "testing"

func TestAdds(t *testing.T) { // passes
	if 2+2 != 4 {
		t.Fatal("arithmetic")
	}
}

func TestSubtractsWrongly(t *testing.T) { // fails
	if 3-1 != 1 {
		t.Fatalf("3-1 = %d, want 1", 3-1)
	}
}

func TestSkipped(t *testing.T) { // skipped
	t.Skip("not here")
}

func TestTable(t *testing.T) { // fails: one subtest fails
	for _, c := range []struct {
		name string
		a, b int
	}{{"small ones", 1, 1}, {"wrong", 2, 3}} {
		t.Run(c.name, func(t *testing.T) {
			if c.a != c.b {
				t.Errorf("%d != %d", c.a, c.b)
			}
		})
	}
}
