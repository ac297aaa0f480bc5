package store

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Redacted replaces every secret value in what the store keeps.
const Redacted = "[redacted]"

// MinSecretLen is the shortest value AddSecrets redacts: shorter ones (a
// flag such as "1") would garble every record while protecting nothing.
const MinSecretLen = 6

// Redaction holds the secret values no stored text may contain and the
// forms they take in stored text: as they are, JSON-escaped (with and without
// Go's HTML escaping) and Go-quoted, since events and details are stored as
// JSON and errors quote what they name. Every store (the SQLite *Store,
// postgres.Store) passes everything it writes through one. The zero value
// redacts nothing; it is safe for concurrent use.
type Redaction struct {
	mu       sync.RWMutex
	secrets  map[string]bool
	forms    []string // every form of every secret, longest first
	replacer *strings.Replacer
}

// redactor is the SQLite store's name for its Redaction.
type redactor = Redaction

// AddSecrets registers values that must never be stored: from then on,
// every text the store writes (events, trial outputs and errors, records,
// isolation reports, scores' details, evaluations, run specs, summaries and
// errors, blobs and artifacts) has each occurrence replaced with Redacted,
// whichever path wrote it. The engine registers the run's env_from values
// and the provider API keys it holds before the run writes anything.
// Values shorter than MinSecretLen are ignored. Safe for concurrent use.
func (s *Store) AddSecrets(values ...string) { s.redact.AddSecrets(values...) }

// AddSecrets registers values to redact from then on (see Store.AddSecrets).
func (r *Redaction) AddSecrets(values ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, v := range values {
		if len(v) < MinSecretLen || r.secrets[v] {
			continue
		}
		if r.secrets == nil {
			r.secrets = map[string]bool{}
		}
		r.secrets[v] = true
		changed = true
	}
	if !changed {
		return
	}
	seen := map[string]bool{}
	r.forms = r.forms[:0]
	for v := range r.secrets {
		for _, f := range secretForms(v) {
			if len(f) >= MinSecretLen && !seen[f] {
				seen[f] = true
				r.forms = append(r.forms, f)
			}
		}
	}
	// Longest first: a secret that contains another is replaced whole.
	slices.SortFunc(r.forms, func(a, b string) int {
		if d := len(b) - len(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	pairs := make([]string, 0, 2*len(r.forms))
	for _, f := range r.forms {
		pairs = append(pairs, f, Redacted)
	}
	r.replacer = strings.NewReplacer(pairs...)
}

// RedactJSON returns JSON as the store keeps it, every registered secret
// redacted: for comparing something with what the store holds.
func (s *Store) RedactJSON(b []byte) []byte { return s.redact.json(b) }

// text, json and reader are the SQLite store's short names.
func (r *Redaction) text(s string) string           { return r.Text(s) }
func (r *Redaction) json(b []byte) []byte           { return r.JSON(b) }
func (r *Redaction) reader(src io.Reader) io.Reader { return r.Reader(src) }

func secretForms(v string) []string {
	forms := []string{v}
	if b, err := json.Marshal(v); err == nil {
		forms = append(forms, string(b[1:len(b)-1]))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) == nil {
		b := bytes.TrimSpace(buf.Bytes())
		forms = append(forms, string(b[1:len(b)-1]))
	}
	q := strconv.Quote(v)
	return append(forms, q[1:len(q)-1])
}

func (r *Redaction) state() (*strings.Replacer, []string) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.replacer, r.forms
}

// Text redacts a string to be stored.
func (r *Redaction) Text(s string) string {
	rep, _ := r.state()
	if rep == nil {
		return s
	}
	return rep.Replace(s)
}

// JSON redacts JSON to be stored and keeps it valid JSON: a secret is
// replaced inside the string it is part of, and when one also matched
// outside any string (a number that happens to equal it), only strings are
// redacted.
func (r *Redaction) JSON(b []byte) []byte {
	rep, forms := r.state()
	if rep == nil || len(b) == 0 || !containsAny(b, forms) {
		return b
	}
	out := []byte(rep.Replace(string(b)))
	if json.Valid(out) || !json.Valid(b) {
		return out
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return out
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(redactValue(v, rep)) != nil {
		return out
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func redactValue(v any, rep *strings.Replacer) any {
	switch x := v.(type) {
	case string:
		return rep.Replace(x)
	case []any:
		for i := range x {
			x[i] = redactValue(x[i], rep)
		}
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[rep.Replace(k)] = redactValue(e, rep)
		}
		return m
	}
	return v
}

func containsAny(b []byte, forms []string) bool {
	for _, f := range forms {
		if bytes.Contains(b, []byte(f)) {
			return true
		}
	}
	return false
}

// Reader redacts a stream in constant memory: it holds back the last
// (longest form − 1) bytes of what it has read, where a secret could still
// begin, until more input or the end shows what they are. The secrets are
// those registered when Reader is called.
func (r *Redaction) Reader(src io.Reader) io.Reader {
	_, forms := r.state()
	if len(forms) == 0 {
		return src
	}
	return &redactReader{src: src, forms: forms, keep: len(forms[0]) - 1}
}

type redactReader struct {
	src   io.Reader
	forms []string // longest first
	keep  int
	in    []byte // read, not yet redacted
	out   []byte // redacted, not yet returned
	eof   bool
	err   error
}

func (r *redactReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.eof {
			return 0, r.err
		}
		buf := make([]byte, 64<<10)
		n, err := r.src.Read(buf)
		r.in = append(r.in, buf[:n]...)
		if err != nil {
			r.eof = true
			if err != io.EOF {
				r.err = err
			} else {
				r.err = io.EOF
			}
		}
		r.redact()
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// redact moves what is settled from in to out: every match that starts
// before the held-back tail (so lies wholly in in), and the text before it.
func (r *redactReader) redact() {
	limit := len(r.in) - r.keep
	if r.eof {
		limit = len(r.in)
	}
	for {
		at, form := -1, ""
		for _, f := range r.forms {
			if i := bytes.Index(r.in, []byte(f)); i >= 0 && (at < 0 || i < at) {
				at, form = i, f // forms are longest first: the first found at a position wins
			}
		}
		if at < 0 || at >= limit {
			break
		}
		r.out = append(r.out, r.in[:at]...)
		r.out = append(r.out, Redacted...)
		r.in = r.in[at+len(form):]
		limit -= at + len(form)
	}
	if limit > 0 {
		r.out = append(r.out, r.in[:limit]...)
		r.in = r.in[limit:]
	}
}
