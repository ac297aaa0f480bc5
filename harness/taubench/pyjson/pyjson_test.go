package pyjson

import (
	"encoding/json"
	"math"
	"os/exec"
	"strings"
	"testing"

	"evals.si/internal/testenv"
)

type inner struct {
	Z  string  `json:"z"`
	A  float64 `json:"a"`
	On *bool   `json:"on"`
}

type outer struct {
	Name  string        `json:"name"`
	Items []inner       `json:"items"`
	By    *Dict[inner]  `json:"by"`
	Tags  []string      `json:"tags"`
	N     int           `json:"n"`
	Extra Dict[float64] `json:"extra"`
}

type date string

func (d date) PyStr() string { return string(d) }

// Python's own json.dumps is the reference: the same values written by
// python3 and by this package, side by side.
func TestDumpsMatchesPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.Missing(t, "python3", "python3 is not on PATH")
	}
	floats := []float64{0, 1, -1, 0.1, 342.81, 1e16, 1e15, 123456789012345678, 1e-4, 1e-5, 1.5e-7, 2.5, 100, 1e22, 5e-324, math.MaxFloat64, -0.0, 3.14159, 0.30000000000000004}
	strs := []string{"plain", "quote\" back\\slash", "tab\tnl\ncr\r", "\x00\x1f\x7f", "café", "📶⁴ Excellent", "é\u2028"}
	var fargs []string
	for _, f := range floats {
		fargs = append(fargs, FloatRepr(f))
	}
	var sjson []string
	for _, s := range strs {
		b, _ := json.Marshal(s)
		sjson = append(sjson, string(b))
	}
	script := `import json, sys
floats = [float(x) for x in sys.argv[1].split(",")]
strs = json.loads(sys.argv[2])
print(json.dumps(floats))
print(json.dumps(strs))
print(json.dumps({"b": [1, 2.0, None, True], "a": {"y": 1, "x": "é"}}, sort_keys=True))
`
	out, err := exec.Command(py, "-c", script, strings.Join(fargs, ","), "["+strings.Join(sjson, ",")+"]").CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	gotF, _ := Dumps(floats)
	gotS, _ := Dumps(strs)
	var d Dict[any]
	d.Set("b", []any{1, 2.0, nil, true})
	var in Dict[any]
	in.Set("y", 1)
	in.Set("x", "é")
	d.Set("a", &in)
	gotSorted, _ := DumpsSorted(&d)
	for i, got := range []string{gotF, gotS, gotSorted} {
		if got != lines[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, got, lines[i])
		}
	}
}

func TestStructsAndDicts(t *testing.T) {
	on := true
	var by Dict[inner]
	by.Set("k2", inner{Z: "b", A: 2})
	by.Set("k1", inner{Z: "a", A: 1.5, On: &on})
	v := outer{Name: "n", Items: []inner{{Z: "x", A: 1}}, By: &by, N: 3}
	v.Extra.Set("x", 1.5) // a Dict that is not a pointer is written too
	got, err := Dumps(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name": "n", "items": [{"z": "x", "a": 1.0, "on": null}], "by": {"k2": {"z": "b", "a": 2.0, "on": null}, "k1": {"z": "a", "a": 1.5, "on": true}}, "tags": [], "n": 3, "extra": {"x": 1.5}}`
	if got != want {
		t.Errorf("Dumps:\n got %s\nwant %s", got, want)
	}
	sorted, _ := DumpsSorted(v)
	wantSorted := `{"by": {"k1": {"a": 1.5, "on": true, "z": "a"}, "k2": {"a": 2.0, "on": null, "z": "b"}}, "extra": {"x": 1.5}, "items": [{"a": 1.0, "on": null, "z": "x"}], "n": 3, "name": "n", "tags": []}`
	if sorted != wantSorted {
		t.Errorf("DumpsSorted:\n got %s\nwant %s", sorted, wantSorted)
	}
	// Round trip keeps the order.
	b, _ := json.Marshal(v)
	var back outer
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got2, _ := Dumps(back); got2 != got {
		t.Errorf("after a JSON round trip:\n got %s\nwant %s", got2, got)
	}
}

func TestToolResult(t *testing.T) {
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"string as is", "yusuf_rossi_9620", "yusuf_rossi_9620"},
		{"bool", true, `"True"`},
		{"float", 25.0, `"25.0"`},
		{"nil", nil, "null"},
		{"list of numbers", []any{1, 2.5}, `["1", "2.5"]`},
		{"model keeps numbers", inner{Z: "z", A: 1}, `{"z": "z", "a": 1.0, "on": null}`},
		{"date", date("2025-01-01"), `"2025-01-01"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ToolResult(c.v)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}
