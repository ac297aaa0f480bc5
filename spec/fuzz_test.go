package spec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse and Validate. Neither may panic;
// a spec that parses must survive a JSON round trip and validate the same
// way after it (what a server does with a submitted EvalRun).
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(base + "judge: &j {connector: openai, model: m}\nharness: {builtin: {user_simulator: {judge: *j, max_turns: 2}}}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("a: &a {<<: *a}\n"))
	f.Add([]byte("dataset: {records: [{id: x, input: [{role: user, content: hi}], expected: !!str 3}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.yaml", data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		verr := file.Validate()
		b, err := json.Marshal(file.Spec)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var s Spec
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("round trip: %v\n%s", err, b)
		}
		if (verr == nil) != (s.Validate() == nil) {
			t.Fatalf("validation differs after a JSON round trip: %v vs %v", verr, s.Validate())
		}
	})
}
