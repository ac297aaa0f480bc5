package swebench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"
)

// readParquet reads instances from a parquet file (the form SWE-bench's
// datasets are published in): each row becomes a JSON object decoded as an
// Instance, so a column may hold a list or a JSON string of one, as in the
// JSON forms.
func readParquet(p string) ([]Instance, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("reading SWE-bench instances: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: not a parquet file: %w", p, err)
	}
	r := parquet.NewReader(pf)
	defer r.Close()
	var out []Instance
	for i := 1; ; i++ {
		row := map[string]any{}
		err := r.Read(&row)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: row %d: %w", p, i, err)
		}
		b, err := json.Marshal(textValues(row))
		if err != nil {
			return nil, fmt.Errorf("%s: row %d: %w", p, i, err)
		}
		var in Instance
		if err := json.Unmarshal(b, &in); err != nil {
			return nil, fmt.Errorf("%s: row %d: %w", p, i, err)
		}
		out = append(out, in)
	}
	return out, nil
}

// textValues turns byte-array cells into strings (JSON would make them
// base64), recursively.
func textValues(v any) any {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case map[string]any:
		for k, e := range x {
			x[k] = textValues(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = textValues(e)
		}
		return x
	}
	return v
}
