package bfcl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"evals.si/bench/importer"
	"evals.si/bench/internal/benchdata"
	"evals.si/dataset"
	"evals.si/spec"
)

// sampleLines are the non-blank lines of a sample file, read apart from
// the importer, and their ids.
func sampleLines(t *testing.T, p string) (lines [][]byte, ids []string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) == 0 {
			continue
		}
		var v struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(l, &v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		lines, ids = append(lines, l), append(ids, v.ID)
	}
	return lines, ids
}

func parse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func imp(t *testing.T, im Importer, raw, baseDir string) (*importer.Result, error) {
	t.Helper()
	return im.Import(context.Background(), parse(t, raw), baseDir)
}

func mustImport(t *testing.T, im Importer, raw, baseDir string) *importer.Result {
	t.Helper()
	res, err := imp(t, im, raw, baseDir)
	if err != nil {
		t.Fatalf("importing %s: %v", raw, err)
	}
	return res
}

func wantErr(t *testing.T, err error, mentions ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", mentions)
	}
	t.Log(err)
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

// bfclMeta is metadata.bfcl, its parts kept raw.
type bfclMeta struct {
	Category string          `json:"category"`
	Entry    json.RawMessage `json:"entry"`
	Answer   json.RawMessage `json:"answer"`
}

func metaOf(t *testing.T, rec spec.Record) bfclMeta {
	t.Helper()
	var m bfclMeta
	if err := json.Unmarshal(rec.Metadata[MetaBFCL], &m); err != nil {
		t.Fatalf("record %s: metadata.bfcl %s: %v", rec.ID, rec.Metadata[MetaBFCL], err)
	}
	return m
}

// Every supported category imports its five sample entries in file order,
// each with its entry as in the file and the answer of its id (none for
// the relevance and irrelevance categories), and no environment.
func TestCategories(t *testing.T) {
	dir := benchdata.Dir(t, "bfcl")
	tests := []struct {
		category string
		answers  bool
		multi    bool
	}{
		{"simple_python", true, false},
		{"simple_java", true, false},
		{"simple_javascript", true, false},
		{"multiple", true, false},
		{"parallel", true, false},
		{"parallel_multiple", true, false},
		{"irrelevance", false, false},
		{"live_simple", true, false},
		{"live_multiple", true, false},
		{"live_parallel", true, false},
		{"live_parallel_multiple", true, false},
		{"live_irrelevance", false, false},
		{"live_relevance", false, false},
		{"multi_turn_base", true, true},
		{"multi_turn_miss_func", true, true},
		{"multi_turn_miss_param", true, true},
		{"multi_turn_long_context", true, true},
	}
	if got := len(tests); got != len(Categories()) {
		t.Fatalf("the table has %d categories, the importer %d", got, len(Categories()))
	}
	for _, tt := range tests {
		t.Run(tt.category, func(t *testing.T) {
			lines, ids := sampleLines(t, filepath.Join(dir, "BFCL_v4_"+tt.category+".json"))
			answers := map[string][]byte{}
			if tt.answers {
				al, aids := sampleLines(t, filepath.Join(dir, "possible_answer", "BFCL_v4_"+tt.category+".json"))
				for i, id := range aids {
					answers[id] = al[i]
				}
			}
			res := mustImport(t, Importer{}, "bfcl://"+tt.category+"?data_dir="+url.QueryEscape(dir), "/nonexistent")
			if len(res.Refused) > 0 || len(res.Notes) > 0 {
				t.Errorf("refused %v, notes %v; want neither", res.Refused, res.Notes)
			}
			var got []string
			for _, r := range res.Records {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, ids) || len(got) != 5 {
				t.Fatalf("records %v, want the file's 5 ids %v", got, ids)
			}
			for i, rec := range res.Records {
				if string(rec.Metadata[importer.MetaBenchmark]) != `"bfcl"` || string(rec.Metadata[MetaCategory]) != `"`+tt.category+`"` {
					t.Errorf("%s: benchmark %s, category %s", rec.ID, rec.Metadata[importer.MetaBenchmark], rec.Metadata[MetaCategory])
				}
				if _, ok := rec.Metadata["environment"]; ok || len(rec.Metadata) != 3 {
					t.Errorf("%s: metadata keys %v, want benchmark, category and bfcl only", rec.ID, keys(rec.Metadata))
				}
				m := metaOf(t, rec)
				if m.Category != tt.category {
					t.Errorf("%s: bfcl.category %q", rec.ID, m.Category)
				}
				if !bytes.Equal(m.Entry, lines[i]) {
					t.Errorf("%s: bfcl.entry is not the file's line:\n got %s\nwant %s", rec.ID, m.Entry, lines[i])
				}
				switch want := answers[rec.ID]; {
				case !tt.answers && m.Answer != nil:
					t.Errorf("%s: bfcl.answer %s, want none", rec.ID, m.Answer)
				case tt.answers && (want == nil || !bytes.Equal(m.Answer, want)):
					t.Errorf("%s: bfcl.answer %s, want %s", rec.ID, m.Answer, want)
				}
				var e struct {
					Question [][]struct{ Role, Content string }
					Function json.RawMessage
				}
				if err := json.Unmarshal(lines[i], &e); err != nil {
					t.Fatal(err)
				}
				var user []string
				for _, msg := range e.Question[0] {
					if msg.Role == "user" {
						user = append(user, msg.Content)
					}
				}
				if want := strings.Join(user, "\n\n"); rec.Input.Text != want || want == "" {
					t.Errorf("%s: input %q, want the first turn's user content %q", rec.ID, rec.Input.Text, want)
				}
				if tt.multi != (e.Function == nil) {
					t.Errorf("%s: function present %v in a multi-turn=%v entry (the sample changed?)", rec.ID, e.Function != nil, tt.multi)
				}
			}
		})
	}
}

func keys(m map[string]spec.JSON) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The URI's forms and query: ids filter in file order, the data
// directory from data_dir (relative to the spec's directory, or absolute)
// or BFCL_DATA_DIR, and the errors for what cannot be imported.
func TestQuery(t *testing.T) {
	dir := benchdata.Dir(t, "bfcl")
	parent, base := filepath.Split(dir)
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	withEnv := Importer{Getenv: env(map[string]string{DataDirEnv: dir})}
	tests := []struct {
		name     string
		im       Importer
		uri      string
		baseDir  string
		ids      []string
		mentions []string // an error mentioning these
	}{
		{"ids in file order", Importer{}, "bfcl://simple_python?ids=simple_python_3,+simple_python_1+,&data_dir=" + dir, "", []string{"simple_python_1", "simple_python_3"}, nil},
		{"an id twice", Importer{}, "bfcl://parallel?ids=parallel_2,parallel_2&data_dir=" + dir, "", []string{"parallel_2"}, nil},
		{"data_dir relative to the spec", Importer{}, "bfcl://multiple?data_dir=" + base, parent, []string{"multiple_0", "multiple_1", "multiple_2", "multiple_3", "multiple_4"}, nil},
		{"data_dir over BFCL_DATA_DIR", Importer{Getenv: env(map[string]string{DataDirEnv: "/nonexistent"})}, "bfcl://multiple?ids=multiple_4&data_dir=" + dir, "", []string{"multiple_4"}, nil},
		{"BFCL_DATA_DIR", withEnv, "bfcl://live_relevance?ids=live_relevance_1-1-0", "/nonexistent", []string{"live_relevance_1-1-0"}, nil},
		{"opaque form", withEnv, "bfcl:irrelevance?ids=irrelevance_0", "", []string{"irrelevance_0"}, nil},
		{"neither data_dir nor BFCL_DATA_DIR", Importer{}, "bfcl://simple_python", dir, nil, []string{"data_dir=", DataDirEnv, "bfcl_eval/data"}},
		{"BFCL_DATA_DIR empty", Importer{Getenv: env(nil)}, "bfcl://simple_python", dir, nil, []string{"data_dir=", DataDirEnv}},
		{"empty data_dir", withEnv, "bfcl://simple_python?data_dir=", dir, nil, []string{"data_dir= is empty"}},
		{"a data_dir without the file", Importer{}, "bfcl://simple_python?data_dir=" + parent, "", nil, []string{filepath.Join(parent, "BFCL_v4_simple_python.json"), "must hold BFCL_v4_<category>.json"}},
		{"unknown id", withEnv, "bfcl://simple_python?ids=simple_python_1,simple_python_99,nope", "", nil, []string{"simple_python_99, nope", "BFCL_v4_simple_python.json", "its ids: simple_python_0, simple_python_1"}},
		{"unknown category", withEnv, "bfcl://simple_go", "", nil, []string{`"simple_go"`, "supported: simple_python, simple_java", "multi_turn_long_context"}},
		{"category in another case", withEnv, "bfcl://Simple_Python", "", nil, []string{`"Simple_Python"`, "supported:"}},
		{"a path for a category", withEnv, "bfcl://data/BFCL_v4_simple_python.json", "", nil, []string{"names a category, not a path", "data_dir=DIR"}},
		{"no category", withEnv, "bfcl://?data_dir=" + dir, "", nil, []string{"names no category", "bfcl://simple_python"}},
		{"image=", withEnv, "bfcl://simple_python?image=python:3", "", nil, []string{"image= does not apply", "without a sandbox"}},
		{"network=deny", withEnv, "bfcl://simple_python?network=deny", "", nil, []string{"network= does not apply"}},
		{"unknown parameter", withEnv, "bfcl://simple_python?instances=x", "", nil, []string{`unknown query parameter "instances"`, "known: ids, data_dir)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := imp(t, tt.im, tt.uri, tt.baseDir)
			if tt.mentions != nil {
				wantErr(t, err, tt.mentions...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range res.Records {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, tt.ids) {
				t.Errorf("records %v, want %v", got, tt.ids)
			}
		})
	}
}

// The memory, web_search and format_sensitivity families are refused with
// their reason, without reading any data; through the dataset source the
// refusal is the load's error.
func TestRefused(t *testing.T) {
	tests := []struct{ category, reason string }{
		{"memory_kv", "agentic pipeline"},
		{"memory_vector", "agentic pipeline"},
		{"memory_rec_sum", "agentic pipeline"},
		{"memory", "agentic pipeline"},
		{"web_search_base", "live web search backend"},
		{"web_search_no_snippet", "live web search backend"},
		{"web_search", "live web search backend"},
		{"format_sensitivity", "prompt-format variants"},
	}
	for _, tt := range tests {
		t.Run(tt.category, func(t *testing.T) {
			res := mustImport(t, Importer{}, "bfcl://"+tt.category, "/nonexistent")
			if len(res.Records) != 0 || len(res.Refused) != 1 || res.Refused[0].Task != tt.category || !strings.Contains(res.Refused[0].Reason, tt.reason) {
				t.Fatalf("records %d, refused %+v; want %s refused for %q", len(res.Records), res.Refused, tt.category, tt.reason)
			}
			_, err := importer.Source(Importer{}, "ids").Records(context.Background(), parse(t, "bfcl://"+tt.category), "/nonexistent")
			wantErr(t, err, tt.category, tt.reason)
		})
	}
}

// writeData makes a data directory with the given files (relative paths).
func writeData(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func sample(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(benchdata.Dir(t, "bfcl"), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dropLine is content without its line holding s.
func dropLine(content, s string) string {
	var out []string
	for _, l := range strings.SplitAfter(content, "\n") {
		if !strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// Bad data files: each error names the file and line (or the file that
// is missing) and what is wrong.
func TestBadData(t *testing.T) {
	const (
		sp    = "BFCL_v4_simple_python.json"
		spAns = "possible_answer/BFCL_v4_simple_python.json"
		mt    = "BFCL_v4_multi_turn_base.json"
	)
	fn := `"function": [{"name": "f", "parameters": {}}]`
	ok := `{"id": "simple_python_0", "question": [[{"role": "user", "content": "hi"}]], ` + fn + "}\n"
	tests := []struct {
		name     string
		uri      string
		files    map[string]string
		mentions []string
	}{
		{"no answer file", "bfcl://simple_python", map[string]string{sp: sample(t, sp)},
			[]string{"possible_answer/" + sp, "no such file", "must hold"}},
		{"an entry without an answer", "bfcl://simple_python", map[string]string{sp: sample(t, sp), spAns: dropLine(sample(t, spAns), `"simple_python_2"`)},
			[]string{sp + ":3:", `entry "simple_python_2" has no answer`, spAns}},
		{"a malformed line", "bfcl://simple_python", map[string]string{sp: ok + ok[:40] + "\n", spAns: sample(t, spAns)},
			[]string{sp + ":2:", "not a JSON object"}},
		{"a malformed answer line", "bfcl://simple_python", map[string]string{sp: ok, spAns: "\n" + `{"id": "simple_python_0", "ground_truth": [}` + "\n"},
			[]string{spAns + ":2:", "not a JSON object"}},
		{"an answer without ground_truth", "bfcl://simple_python", map[string]string{sp: ok, spAns: `{"id": "simple_python_0"}`},
			[]string{spAns + ":1:", `no "ground_truth"`}},
		{"an array line", "bfcl://simple_python", map[string]string{sp: `[1, 2]`, spAns: sample(t, spAns)},
			[]string{sp + ":1:", "not a JSON object"}},
		{"a null line", "bfcl://simple_python", map[string]string{sp: "null", spAns: sample(t, spAns)},
			[]string{sp + ":1:", "not a JSON object"}},
		{"no id", "bfcl://simple_python", map[string]string{sp: `{"question": [[]], ` + fn + "}", spAns: sample(t, spAns)},
			[]string{sp + ":1:", `no "id" string`}},
		{"a number id", "bfcl://simple_python", map[string]string{sp: `{"id": 3, "question": [[]], ` + fn + "}", spAns: sample(t, spAns)},
			[]string{sp + ":1:", `no "id" string`}},
		{"a repeated id", "bfcl://simple_python", map[string]string{sp: ok + "\n" + ok, spAns: sample(t, spAns)},
			[]string{sp + ":3:", `"simple_python_0" repeats the id of line 1`}},
		{"no question", "bfcl://simple_python", map[string]string{sp: `{"id": "a", "question": null, ` + fn + "}", spAns: sample(t, spAns)},
			[]string{sp + ":1:", `entry "a" has no "question" list`}},
		{"no function", "bfcl://simple_python", map[string]string{sp: `{"id": "a", "question": [[]], "function": {}}`, spAns: sample(t, spAns)},
			[]string{sp + ":1:", `entry "a" has no "function" list`}},
		{"multi-turn without involved_classes", "bfcl://multi_turn_base", map[string]string{mt: `{"id": "m", "question": [[]], "initial_config": {}}`},
			[]string{mt + ":1:", `multi-turn entry "m" has no "involved_classes" list`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeData(t, tt.files)
			_, err := imp(t, Importer{}, tt.uri+"?data_dir="+url.QueryEscape(dir), "")
			wantErr(t, err, append(tt.mentions, dir)...)
		})
	}
}

// An entry's JSON reaches the record byte for byte (key order, spacing,
// number forms, escapes, HTML characters), and survives the record's own
// JSON encoding with its numbers' forms; answers are matched by id, not
// by line; lines have no length limit; the relevance categories read no
// answer file.
func TestRawEntries(t *testing.T) {
	long := strings.Repeat("x", 3<<20)
	entry := `{"question": [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "caf\u00e9 & <b>é</b>"}, {"role": "user", "content": "second"}]],  "id":"live_simple_7", "function": [{"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "float", "default": 1.0, "big": 1e2, "neg": -0.0}}}}], "extra": "` + long + `"}`
	other := `{"id": "live_simple_8", "question": [[{"role": "user", "content": "q"}]], "function": []}`
	answers := `{"id": "live_simple_8", "ground_truth": [{"f": {"x": [2.50]}}]}` + "\r\n" +
		`{"id": "live_simple_7", "ground_truth": [{"f": {"x": [1.0, ""]}}]}` + "\n"
	dir := writeData(t, map[string]string{
		"BFCL_v4_live_simple.json":                 "\n" + entry + "\r\n\n" + other,
		"possible_answer/BFCL_v4_live_simple.json": answers,
		"BFCL_v4_live_irrelevance.json":            strings.Replace(other, "live_simple_8", "live_irrelevance_0", 1),
	})
	res := mustImport(t, Importer{}, "bfcl://live_simple?data_dir="+url.QueryEscape(dir), "")
	if len(res.Records) != 2 {
		t.Fatalf("%d records, want 2", len(res.Records))
	}
	rec := res.Records[0]
	m := metaOf(t, rec)
	if !bytes.Equal(m.Entry, []byte(entry)) {
		t.Errorf("entry changed: got %d bytes, want %d", len(m.Entry), len(entry))
	}
	if want := `{"id": "live_simple_7", "ground_truth": [{"f": {"x": [1.0, ""]}}]}`; string(m.Answer) != want {
		t.Errorf("answer %s, want %s (matched by id)", m.Answer, want)
	}
	if want := "café & <b>é</b>\n\nsecond"; rec.Input.Text != want {
		t.Errorf("input %q, want %q", rec.Input.Text, want)
	}
	if want := `[{"f": {"x": [2.50]}}]`; !strings.Contains(string(metaOf(t, res.Records[1]).Answer), want) {
		t.Errorf("the second entry's answer %s, want %s", metaOf(t, res.Records[1]).Answer, want)
	}

	// Encoded as a record travels (stored, sent to a worker), the entry
	// is the same JSON with the same number forms.
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back spec.Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(entry)); err != nil {
		t.Fatal(err)
	}
	got := metaOf(t, back).Entry
	for _, s := range []string{`"default":1.0`, `"big":1e2`, `"neg":-0.0`, `caf\u00e9`} {
		if !bytes.Contains(got, []byte(s)) {
			t.Errorf("after encoding the record the entry has no %s", s)
		}
	}
	var a, c any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal(compact.Bytes(), &c) != nil || !jsonEqual(a, c) {
		t.Errorf("after encoding the record the entry is another value")
	}

	// No answer file for live_irrelevance: none is read.
	res = mustImport(t, Importer{}, "bfcl://live_irrelevance?data_dir="+url.QueryEscape(dir), "")
	if len(res.Records) != 1 || metaOf(t, res.Records[0]).Answer != nil {
		t.Errorf("live_irrelevance: %+v", res.Records)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// A first turn with no user content still gives the record an input.
func TestInputFallback(t *testing.T) {
	dir := writeData(t, map[string]string{
		"BFCL_v4_irrelevance.json": `{"id": "irrelevance_9", "question": [[{"role": "system", "content": "s"}], [{"role": "user", "content": "later"}]], "function": []}`,
	})
	res := mustImport(t, Importer{}, "bfcl://irrelevance?data_dir="+url.QueryEscape(dir), "")
	if got := res.Records[0].Input.Text; got != "BFCL irrelevance entry irrelevance_9" {
		t.Errorf("input %q", got)
	}
}

// Through the dataset registry, as a spec file's dataset.uri loads:
// data_dir relative to the spec's directory, BFCL_DATA_DIR through the
// registered Getenv, and errors naming the URI.
func TestRegistry(t *testing.T) {
	dir := benchdata.Dir(t, "bfcl")
	parent, base := filepath.Split(dir)
	reg := dataset.NewRegistry()
	Register(reg, func(k string) string {
		if k == DataDirEnv {
			return dir
		}
		return ""
	})
	load := func(uri, specDir string) ([]spec.Record, error) {
		return reg.Load(context.Background(), &spec.File{Spec: &spec.Spec{Dataset: spec.Dataset{URI: uri}}, Path: filepath.Join(specDir, "spec.yaml"), Dir: specDir})
	}
	recs, err := load("bfcl://multi_turn_miss_func?data_dir="+base+"&ids=multi_turn_miss_func_4,multi_turn_miss_func_0", parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].ID != "multi_turn_miss_func_0" || recs[1].ID != "multi_turn_miss_func_4" {
		t.Fatalf("records %+v", recs)
	}
	var entry struct {
		InvolvedClasses []string          `json:"involved_classes"`
		MissedFunction  map[string]any    `json:"missed_function"`
		InitialConfig   map[string]any    `json:"initial_config"`
		Function        []json.RawMessage `json:"function"`
	}
	var m struct {
		Entry  json.RawMessage `json:"entry"`
		Answer struct {
			GroundTruth [][]string `json:"ground_truth"`
		} `json:"answer"`
	}
	if err := json.Unmarshal(recs[0].Metadata[MetaBFCL], &m); err != nil || json.Unmarshal(m.Entry, &entry) != nil {
		t.Fatalf("metadata.bfcl %s: %v", recs[0].Metadata[MetaBFCL], err)
	}
	if len(entry.InvolvedClasses) == 0 || entry.MissedFunction == nil || entry.InitialConfig == nil || entry.Function != nil || len(m.Answer.GroundTruth) == 0 {
		t.Errorf("multi-turn entry %s / answer %+v", m.Entry, m.Answer)
	}

	if recs, err = load("bfcl://live_parallel", "/nonexistent"); err != nil || len(recs) != 5 {
		t.Errorf("BFCL_DATA_DIR: %d records, %v", len(recs), err)
	}
	_, err = load("bfcl://memory_kv", parent)
	wantErr(t, err, "loading dataset bfcl://memory_kv", "memory_kv", "agentic pipeline")
	_, err = load("bfcl://simple_python?ids=simple_python_0,gone&data_dir="+base, parent)
	wantErr(t, err, "gone", "simple_python_0")
}

// The importer's reader takes lines longer than bufio.Scanner's default
// limit (a long_context entry runs to hundreds of KB).
func TestReadLinesLong(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f.json")
	long := `{"id": "` + strings.Repeat("y", 2*bufio.MaxScanTokenSize) + `"}`
	if err := os.WriteFile(p, []byte(long+"\n"+long), 0o644); err != nil {
		t.Fatal(err)
	}
	var ns []int
	if err := readLines(p, func(n int, b []byte) error {
		if string(b) != long {
			t.Errorf("line %d: %d bytes, want %d", n, len(b), len(long))
		}
		ns = append(ns, n)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ns, []int{1, 2}) {
		t.Errorf("lines %v", ns)
	}
}
