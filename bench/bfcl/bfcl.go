// Package bfcl imports the Berkeley Function Calling Leaderboard
// (bfcl://CATEGORY?ids=a,b&data_dir=DIR).
//
// DIR is BFCL's data directory, bfcl_eval/data of the bfcl-eval package
// or of a gorilla checkout: the entries are DIR/BFCL_v4_<CATEGORY>.json
// and their answers DIR/possible_answer/BFCL_v4_<CATEGORY>.json, both
// JSON Lines despite the extension. data_dir is relative to the spec
// file's directory (or absolute); without it, BFCL_DATA_DIR is read
// through the Getenv the importer is given.
//
// Each entry becomes a record whose metadata.bfcl holds the category, the
// entry as it is in the file and its possible answer (matched by id, not
// by line); the harness (python/adapters/bfcl) offers the functions,
// runs the model and grades with BFCL's own checkers. No
// metadata.environment: BFCL trials run without a sandbox.
//
// Refused with the reason: the memory, web_search and format_sensitivity
// categories, which need BFCL's agentic pipeline, a live search backend or
// prompt-format variants.
package bfcl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"evals.si/bench/importer"
	"evals.si/dataset"
	"evals.si/spec"
)

// Scheme is the dataset URI scheme.
const Scheme = "bfcl"

// DataDirParam is the query parameter naming BFCL's data directory.
const DataDirParam = "data_dir"

// DataDirEnv names the data directory when the URI has no data_dir=.
const DataDirEnv = "BFCL_DATA_DIR"

// MetaBFCL is the record metadata key holding the entry, its category and
// its answer, for the harness.
const MetaBFCL = "bfcl"

// MetaCategory is the record metadata key the run summary groups scores
// by.
const MetaCategory = "category"

// Register makes reg serve bfcl:// URIs; getenv reads BFCL_DATA_DIR (nil:
// only data_dir= names the data).
func Register(reg *dataset.Registry, getenv func(string) string) {
	reg.Register(Scheme, importer.Source(Importer{Getenv: getenv}, "ids"))
}

// Importer imports BFCL categories.
type Importer struct {
	// Getenv reads BFCL_DATA_DIR when the URI has no data_dir= (nil: the
	// variable is not read).
	Getenv func(string) string
}

// Categories are the categories that import, in BFCL's order.
func Categories() []string {
	return []string{
		"simple_python", "simple_java", "simple_javascript",
		"multiple", "parallel", "parallel_multiple", "irrelevance",
		"live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
		"live_irrelevance", "live_relevance",
		"multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context",
	}
}

// refusal is why a category family does not import ("" when it is not
// refused), by name prefix.
func refusal(category string) string {
	switch {
	case strings.HasPrefix(category, "memory"):
		return "BFCL's memory categories need its agentic pipeline (memory backends fed by prerequisite conversations), which the BFCL harness does not run"
	case strings.HasPrefix(category, "web_search"):
		return "BFCL's web_search categories need a live web search backend, which the BFCL harness does not run"
	case strings.HasPrefix(category, "format_sensitivity"):
		return "BFCL's format_sensitivity category runs prompt-format variants for prompting models, which the BFCL harness does not run"
	}
	return ""
}

// hasAnswers reports whether a category has possible answers: the
// relevance and irrelevance ones are graded by whether a call is made.
func hasAnswers(category string) bool {
	switch category {
	case "irrelevance", "live_irrelevance", "live_relevance":
		return false
	}
	return true
}

func multiTurn(category string) bool { return strings.HasPrefix(category, "multi_turn_") }

// Import imports the entries u names.
func (im Importer) Import(ctx context.Context, u *url.URL, baseDir string) (*importer.Result, error) {
	for k := range u.Query() {
		switch k {
		case "ids", DataDirParam:
		case "image", "network":
			return nil, fmt.Errorf("%s= does not apply to BFCL, whose entries run without a sandbox; leave it out", k)
		default:
			return nil, fmt.Errorf("unknown query parameter %q in %s (known: ids, %s)", k, u.Redacted(), DataDirParam)
		}
	}
	q, err := importer.ParseQuery(u, "ids", DataDirParam)
	if err != nil {
		return nil, err
	}
	category, err := categoryOf(u)
	if err != nil {
		return nil, err
	}
	if reason := refusal(category); reason != "" {
		return &importer.Result{Refused: []importer.Refusal{{Task: category, Reason: reason}}}, nil
	}
	if !slices.Contains(Categories(), category) {
		return nil, fmt.Errorf("no BFCL category %q (supported: %s)", category, strings.Join(Categories(), ", "))
	}
	dir, err := im.dataDir(q.Values, baseDir)
	if err != nil {
		return nil, err
	}

	entriesPath := filepath.Join(dir, "BFCL_v4_"+category+".json")
	entries, err := readEntries(entriesPath, multiTurn(category))
	if err != nil {
		return nil, withHint(err, dir)
	}
	entries, err = selectIDs(entries, q.Names, entriesPath)
	if err != nil {
		return nil, err
	}
	var answers map[string]line
	answersPath := filepath.Join(dir, "possible_answer", "BFCL_v4_"+category+".json")
	if hasAnswers(category) {
		if answers, err = readAnswers(answersPath); err != nil {
			return nil, withHint(err, dir)
		}
	}

	res := &importer.Result{}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Built by hand, not marshalled: json.Marshal would compact and
		// HTML-escape the entry, and the harness gets it as in the file.
		var b bytes.Buffer
		b.WriteString(`{"category":`)
		b.Write(importer.MustJSON(category))
		b.WriteString(`,"entry":`)
		b.Write(e.raw)
		if answers != nil {
			a, ok := answers[e.id]
			if !ok {
				return nil, fmt.Errorf("%s:%d: entry %q has no answer in %s (BFCL grades %s entries against their possible answers; use the possible_answer/ directory of the same BFCL data)", entriesPath, e.n, e.id, answersPath, category)
			}
			b.WriteString(`,"answer":`)
			b.Write(a.raw)
		}
		b.WriteString(`}`)
		res.Records = append(res.Records, spec.Record{
			ID:    e.id,
			Input: spec.Input{Text: inputText(e, category)},
			Metadata: map[string]spec.JSON{
				importer.MetaBenchmark: importer.MustJSON(Scheme),
				MetaCategory:           importer.MustJSON(category),
				MetaBFCL:               spec.JSON(b.Bytes()),
			},
		})
	}
	return res, nil
}

// categoryOf is the category a URI names: bfcl://CATEGORY or bfcl:CATEGORY.
func categoryOf(u *url.URL) (string, error) {
	c := u.Host + u.Path
	if u.Opaque != "" {
		c = u.Opaque
	}
	c = strings.Trim(c, "/")
	if c == "" {
		return "", errors.New("the URI names no category: use bfcl://CATEGORY?data_dir=DIR, e.g. bfcl://simple_python")
	}
	if strings.Contains(c, "/") {
		return "", fmt.Errorf("bfcl:// names a category, not a path as %q (e.g. bfcl://simple_python); give BFCL's data directory as data_dir=DIR", c)
	}
	return c, nil
}

// dataDir is the directory data_dir= names (relative to baseDir), or
// BFCL_DATA_DIR.
func (im Importer) dataDir(v url.Values, baseDir string) (string, error) {
	return importer.DataDir(v, DataDirParam, DataDirEnv, im.Getenv, baseDir, "BFCL's data directory",
		"it is the bfcl_eval/data directory the bfcl-eval package ships (pip show -f bfcl-eval), or berkeley-function-call-leaderboard/bfcl_eval/data in a gorilla checkout")
}

// withHint adds, to a file that cannot be opened, what the data directory
// must hold.
func withHint(err error, dir string) error {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Op == "open" {
		return fmt.Errorf("%w (the BFCL data directory %s must hold BFCL_v4_<category>.json and possible_answer/, as bfcl_eval/data does)", err, dir)
	}
	return err
}

// line is one JSON object of a BFCL file.
type line struct {
	raw []byte // as in the file, without the line ending
	n   int    // 1-based line number
	id  string
	// question is the entry's list of turns (entries only).
	question []json.RawMessage
}

// readLines calls fn with each non-blank line of path and its number.
// Lines have no length limit: a long_context entry runs to hundreds of KB.
func readLines(path string, fn func(n int, b []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	for n := 1; ; n++ {
		b, err := r.ReadBytes('\n')
		if len(b) > 0 {
			if b = bytes.TrimSpace(b); len(b) > 0 {
				if ferr := fn(n, b); ferr != nil {
					return fmt.Errorf("%s:%d: %w", path, n, ferr)
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
	}
}

// object decodes b as a JSON object with a string id.
func object(b []byte) (map[string]json.RawMessage, string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		if json.Valid(b) {
			return nil, "", fmt.Errorf("not a JSON object but %.20s (BFCL files hold one JSON object a line)", b)
		}
		return nil, "", fmt.Errorf("not a JSON object (BFCL files hold one JSON object a line): %v", err)
	}
	var id string
	if raw, ok := m["id"]; !ok || json.Unmarshal(raw, &id) != nil || id == "" {
		return nil, "", errors.New(`the object has no "id" string`)
	}
	return m, id, nil
}

// array decodes raw as a JSON array; ok is false for anything else
// (null included).
func array(raw json.RawMessage) ([]json.RawMessage, bool) {
	var a []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &a) != nil {
		return nil, false
	}
	return a, true
}

// readEntries reads a category's entries, checked enough to be graded:
// a string id, a question list, and the functions (single-turn) or the
// involved classes (multi-turn).
func readEntries(path string, multi bool) ([]line, error) {
	var out []line
	seen := map[string]int{}
	err := readLines(path, func(n int, b []byte) error {
		m, id, err := object(b)
		if err != nil {
			return err
		}
		if first, dup := seen[id]; dup {
			return fmt.Errorf("entry %q repeats the id of line %d", id, first)
		}
		seen[id] = n
		q, ok := array(m["question"])
		if !ok {
			return fmt.Errorf(`entry %q has no "question" list`, id)
		}
		if multi {
			if _, ok := array(m["involved_classes"]); !ok {
				return fmt.Errorf(`multi-turn entry %q has no "involved_classes" list`, id)
			}
		} else if _, ok := array(m["function"]); !ok {
			return fmt.Errorf(`entry %q has no "function" list`, id)
		}
		out = append(out, line{raw: b, n: n, id: id, question: q})
		return nil
	})
	return out, err
}

// readAnswers reads a possible_answer file, by id.
func readAnswers(path string) (map[string]line, error) {
	out := map[string]line{}
	err := readLines(path, func(n int, b []byte) error {
		m, id, err := object(b)
		if err != nil {
			return err
		}
		if first, dup := out[id]; dup {
			return fmt.Errorf("answer %q repeats the id of line %d", id, first.n)
		}
		if gt, ok := m["ground_truth"]; !ok || string(gt) == "null" {
			return fmt.Errorf(`answer %q has no "ground_truth"`, id)
		}
		out[id] = line{raw: b, n: n, id: id}
		return nil
	})
	return out, err
}

// selectIDs keeps the entries whose ids are in want (all when want is
// empty), in file order; an id the file does not have is an error.
func selectIDs(entries []line, want []string, path string) ([]line, error) {
	if len(want) == 0 {
		return entries, nil
	}
	have := make(map[string]bool, len(entries))
	for _, e := range entries {
		have[e.id] = true
	}
	keep := make(map[string]bool, len(want))
	var missing []string
	for _, w := range want {
		if !have[w] && !keep[w] {
			missing = append(missing, w)
		}
		keep[w] = true
	}
	if len(missing) > 0 {
		var ids []string
		for i, e := range entries {
			if i == 5 {
				ids = append(ids, "…")
				break
			}
			ids = append(ids, e.id)
		}
		return nil, fmt.Errorf("%s has no entry with id %s (its ids: %s)", path, strings.Join(missing, ", "), strings.Join(ids, ", "))
	}
	var out []line
	for _, e := range entries {
		if keep[e.id] {
			out = append(out, e)
		}
	}
	return out, nil
}

// inputText is what a person reading the run sees as the record's input:
// the user messages of the first turn (system messages left out).
func inputText(e line, category string) string {
	var parts []string
	if len(e.question) > 0 {
		var msgs []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(e.question[0], &msgs) == nil {
			for _, m := range msgs {
				var s string
				if m.Role == "user" && json.Unmarshal(m.Content, &s) == nil && s != "" {
					parts = append(parts, s)
				}
			}
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("BFCL %s entry %s", category, e.id)
	}
	return strings.Join(parts, "\n\n")
}
