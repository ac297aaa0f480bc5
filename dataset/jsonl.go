package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"evals.si/spec"
)

// maxLineErrors bounds the problems reported for one file; past that the
// file is probably not JSONL at all.
const maxLineErrors = 20

// ReadFile reads a JSONL dataset; see ReadJSONL.
func ReadFile(path string) ([]spec.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadJSONL(f, path)
}

// ReadJSONL reads records, one JSON object per line; blank lines are
// skipped. Every problem is reported with name:line: unknown fields (a
// misspelt "input" is an error, not an empty record), lines that are not
// one JSON object, records without an id, and duplicate ids (naming both
// lines).
func ReadJSONL(r io.Reader, name string) ([]spec.Record, error) {
	br := bufio.NewReader(r)
	var (
		recs  []spec.Record
		errs  []error
		first = map[string]int{}
	)
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...)))
	}
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			var rec spec.Record
			dec := json.NewDecoder(bytes.NewReader(t))
			dec.DisallowUnknownFields()
			switch derr := dec.Decode(&rec); {
			case derr != nil:
				fail(line, "%s", jsonProblem(derr))
			case dec.More():
				fail(line, "more than one JSON value on the line; put one record per line")
			case rec.ID == "":
				fail(line, "record has no id")
			default:
				if j, dup := first[rec.ID]; dup {
					fail(line, "duplicate record id %q (first at line %d)", rec.ID, j)
				} else {
					first[rec.ID] = line
					recs = append(recs, rec)
				}
			}
			if len(errs) >= maxLineErrors {
				errs = append(errs, fmt.Errorf("%s: stopped after %d problems", name, maxLineErrors))
				break
			}
		}
		if err == io.EOF {
			break
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return recs, nil
}

// jsonProblem rewords encoding/json's errors for a person reading a dataset.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te) && te.Field == "":
		return fmt.Sprintf("a record must be a JSON object with id and input, not a %s", te.Value)
	case errors.As(err, &te):
		return fmt.Sprintf("%s must not be a %s", te.Field, te.Value)
	}
	msg := strings.ReplaceAll(err.Error(), "json: ", "")
	if strings.HasPrefix(msg, "unknown field") {
		msg += " (a record has id, input, expected and metadata)"
	}
	return msg
}
