package dataset

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"evals.si/spec"
)

func loadSpec(t *testing.T, path string) *spec.File {
	t.Helper()
	f, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestReadJSONL(t *testing.T) {
	recs, err := ReadFile("testdata/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	if want := []string{"fix-add", "fix-div", "netted"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("ids = %v, want %v (blank lines skipped)", ids, want)
	}
	if recs[0].Input.Text != "Fix add in calc.py." || string(recs[0].Expected) != `{"tests": 2}` {
		t.Errorf("record 0 = %+v", recs[0])
	}
	if recs[1].Input.Prompt() != "Fix div in calc.py." || len(recs[1].Input.Messages) != 2 {
		t.Errorf("record 1 input = %+v", recs[1].Input)
	}
	if string(recs[2].Metadata["difficulty"]) != "3" {
		t.Errorf("record 2 metadata = %v", recs[2].Metadata)
	}
}

func TestReadJSONLErrors(t *testing.T) {
	_, err := ReadFile("testdata/bad.jsonl")
	want := []string{
		`testdata/bad.jsonl:2: unknown field "prompt" (a record has id, input, expected and metadata)`,
		`testdata/bad.jsonl:3: not valid JSON at byte 2: invalid character 'o' in literal null (expecting 'u')`,
		`testdata/bad.jsonl:4: record has no id`,
		`testdata/bad.jsonl:5: duplicate record id "a" (first at line 1)`,
		`testdata/bad.jsonl:6: a record must be a JSON object with id and input, not a array`,
		`testdata/bad.jsonl:7: input must be a string or a list of {role, content} messages`,
		`testdata/bad.jsonl:8: more than one JSON value on the line; put one record per line`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("got:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

func TestReadJSONLTable(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ids      []string
		err      string
	}{
		{"empty", "", nil, ""},
		{"only blank lines", "\n  \n\t\n", nil, ""},
		{"no trailing newline", `{"id":"a","input":"x"}`, []string{"a"}, ""},
		{"CRLF", "{\"id\":\"a\",\"input\":\"x\"}\r\n{\"id\":\"b\",\"input\":\"y\"}\r\n", []string{"a", "b"}, ""},
		{"long line", `{"id":"a","input":"` + strings.Repeat("x", 200_000) + `"}`, []string{"a"}, ""},
		{"truncated", `{"id":"a","input":"x"`, nil, "d.jsonl:1: unexpected EOF"},
		{"empty id", `{"id":"","input":"x"}`, nil, "d.jsonl:1: record has no id"},
		{"message with unknown field", `{"id":"a","input":[{"role":"user","text":"x"}]}`, nil, `d.jsonl:1: input messages: unknown field "text"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := ReadJSONL(strings.NewReader(tc.in), "d.jsonl")
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("err = %v, want prefix %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range recs {
				ids = append(ids, r.ID)
			}
			if !reflect.DeepEqual(ids, tc.ids) {
				t.Errorf("ids = %v, want %v", ids, tc.ids)
			}
		})
	}
}

func TestReadJSONLStopsAfterManyProblems(t *testing.T) {
	_, err := ReadJSONL(strings.NewReader(strings.Repeat("nope\n", 100)), "d.jsonl")
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxLineErrors+1 || lines[maxLineErrors] != "d.jsonl: stopped after 20 problems" {
		t.Fatalf("got %d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

// tasksSource serves records named by the URI's host and query, the way a
// benchmark importer would.
type tasksSource struct{}

func (tasksSource) Records(ctx context.Context, u *url.URL, baseDir string) ([]spec.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []spec.Record
	for _, id := range strings.Split(u.Query().Get("tasks"), ",") {
		out = append(out, spec.Record{ID: u.Host + "/" + id, Input: spec.Input{Text: "task " + id + " in " + baseDir}})
	}
	return out, nil
}

func TestRegistryLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	data, err := os.ReadFile("testdata/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	write("tasks.jsonl", string(data))
	const tgt = "target: {connector: openai, model: m}\n"

	reg := NewRegistry()
	reg.Register("bench", tasksSource{})
	reg.Register("Dup", SourceFunc(func(context.Context, *url.URL, string) ([]spec.Record, error) {
		return []spec.Record{{ID: "x"}, {ID: "x"}}, nil
	}))
	reg.Register("broken", SourceFunc(func(context.Context, *url.URL, string) ([]spec.Record, error) {
		return nil, errors.New("index missing")
	}))

	for _, tc := range []struct {
		name, spec string
		ids        []string
		err        string
	}{
		{"inline", "dataset: {records: [{id: a, input: x}, {id: b, input: y}]}\n" + tgt, []string{"a", "b"}, ""},
		{"relative path", "dataset: {path: tasks.jsonl}\n" + tgt, []string{"fix-add", "fix-div", "netted"}, ""},
		{"absolute path", "dataset: {path: " + filepath.Join(dir, "tasks.jsonl") + "}\n" + tgt, []string{"fix-add", "fix-div", "netted"}, ""},
		{"missing file", "dataset: {path: nope.jsonl}\n" + tgt, nil,
			fmt.Sprintf("%s:1:17: cannot read dataset nope.jsonl: open %s: no such file or directory", filepath.Join(dir, "s.yaml"), filepath.Join(dir, "nope.jsonl"))},
		{"uri", "dataset: {uri: 'bench://suite?tasks=1,2'}\n" + tgt, []string{"suite/1", "suite/2"}, ""},
		{"scheme case", "dataset: {uri: 'BENCH://s?tasks=9'}\n" + tgt, []string{"s/9"}, ""},
		{"unknown scheme", "dataset: {uri: 'swebench://data/test.jsonl'}\n" + tgt, nil,
			filepath.Join(dir, "s.yaml") + `:1:16: no dataset source for scheme "swebench" (registered: bench, broken, dup)`},
		{"source error", "dataset: {uri: 'broken://x'}\n" + tgt, nil, "loading dataset broken://x: index missing"},
		{"source duplicates", "dataset: {uri: 'dup://x'}\n" + tgt, nil, `dataset dup://x: duplicate record id "x" (records 1 and 2)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := loadSpec(t, write("s.yaml", tc.spec))
			recs, err := reg.Load(context.Background(), f)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v\nwant  %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range recs {
				ids = append(ids, r.ID)
			}
			if !reflect.DeepEqual(ids, tc.ids) {
				t.Errorf("ids = %v, want %v", ids, tc.ids)
			}
			if tc.name == "uri" && recs[0].Input.Text != "task 1 in "+dir {
				t.Errorf("source got baseDir: %q", recs[0].Input.Text)
			}
		})
	}

	t.Run("missing file is fs.ErrNotExist", func(t *testing.T) {
		f := loadSpec(t, write("s.yaml", "dataset: {path: nope.jsonl}\n"+tgt))
		if _, err := reg.Load(context.Background(), f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("JSONL errors keep their own file:line", func(t *testing.T) {
		write("bad.jsonl", "{\"id\":\"a\",\"input\":\"x\"}\n{\"id\":\"a\",\"input\":\"y\"}\n")
		f := loadSpec(t, write("s.yaml", "dataset: {path: bad.jsonl}\n"+tgt))
		_, err := reg.Load(context.Background(), f)
		want := filepath.Join(dir, "bad.jsonl") + `:2: duplicate record id "a" (first at line 1)`
		if err == nil || err.Error() != want {
			t.Errorf("err = %v, want %s", err, want)
		}
	})
	t.Run("no sources registered", func(t *testing.T) {
		f := loadSpec(t, write("s.yaml", "dataset: {uri: 'x://y'}\n"+tgt))
		_, err := NewRegistry().Load(context.Background(), f)
		if err == nil || !strings.HasSuffix(err.Error(), `no dataset source for scheme "x" (none are registered)`) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("cancelled context reaches the source", func(t *testing.T) {
		f := loadSpec(t, write("s.yaml", "dataset: {uri: 'bench://s?tasks=1'}\n"+tgt))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := reg.Load(ctx, f); !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestRegisterTwicePanics(t *testing.T) {
	reg := NewRegistry()
	reg.Register("a", tasksSource{})
	defer func() {
		if recover() == nil {
			t.Error("registering a scheme twice did not panic")
		}
	}()
	reg.Register("A", tasksSource{})
}
