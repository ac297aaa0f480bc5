package traces

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"evals.si/spec"
)

// The fixture testdata/shop.jsonl, in the Collector file exporter's format:
//
//	t1 shop  POST /checkout 10:00, 1200ms, gen_ai messages in and out; its child span on another line
//	t2 shop  POST /chat     11:00, 300ms, status error, OpenInference input.value/output.value, retries=3
//	t3 gateway GET / → shop POST /chat 09:00, 700ms, staging, system instructions + a tool call part
//	t4 shop  GET /health    11:30, no input
//	t5 shop  POST /chat     three days earlier (outside 24h)
//	t6 billing only
const (
	t1 = "0af7651916cd43dd8448eb211c80319c"
	t2 = "4bf92f3577b34da6a3ce929d0e0e4736"
	t3 = "5b8efff798038103d269b633813fc60c"
)

var fixtureNow = time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)

func newTestSource(o Options) *Source {
	if o.Now == nil {
		o.Now = func() time.Time { return fixtureNow }
	}
	o.Logger = slog.New(slog.DiscardHandler)
	return NewSource(o)
}

func read(t *testing.T, d spec.TracesDataset) ([]spec.Record, Stats) {
	t.Helper()
	if d.Service == "" {
		d.Service = "shop"
	}
	if d.File == "" && d.URL == "" {
		d.File = "shop.jsonl"
	}
	recs, st, err := newTestSource(Options{}).Read(context.Background(), d, "testdata")
	if err != nil {
		t.Fatal(err)
	}
	return recs, st
}

func ids(recs []spec.Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

func TestFileRecordsMapping(t *testing.T) {
	recs, st := read(t, spec.TracesDataset{})
	// Newest first; t4 has no input, t5 is outside the window, t6 is
	// another service's.
	if got, want := ids(recs), []string{t2, t1, t3}; !slices.Equal(got, want) {
		t.Fatalf("ids %v, want %v", got, want)
	}
	want := Stats{Traces: 5, OutOfWindow: 1, NoInput: 1, Records: 3}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	byID := map[string]spec.Record{}
	for _, r := range recs {
		byID[r.ID] = r
	}

	// t1: semconv messages in, the production answer as expected, the
	// root span (not its chat child) as the record's span.
	r := byID[t1]
	if got := r.Input.Messages; len(got) != 1 || got[0] != (spec.InputMessage{Role: "user", Content: "Check out my cart"}) {
		t.Errorf("t1 input %+v", got)
	}
	if string(r.Expected) != `"Your order is placed."` {
		t.Errorf("t1 expected %s", r.Expected)
	}
	var meta map[string]string
	if err := json.Unmarshal(r.Metadata["trace"], &meta); err != nil {
		t.Fatal(err)
	}
	wantMeta := map[string]string{"trace_id": t1, "span_id": "b7ad6b7169203331", "service": "shop", "name": "POST /checkout", "start": "2026-01-02T10:00:00Z"}
	if fmt.Sprint(meta) != fmt.Sprint(wantMeta) {
		t.Errorf("t1 metadata.trace %v, want %v", meta, wantMeta)
	}

	// t2: OpenInference text.
	if r := byID[t2]; r.Input.Text != "Where is my order?" || r.Input.Messages != nil || string(r.Expected) != `"It ships tomorrow."` {
		t.Errorf("t2 %+v expected %s", r.Input, r.Expected)
	}

	// t3: the shop span under the gateway's root is shop's root span; the
	// system instructions lead; the tool call part and the tool message
	// (no text) are not in a {role, content} input.
	r = byID[t3]
	wantIn := []spec.InputMessage{{Role: "system", Content: "You are a shop assistant."}, {Role: "user", Content: "Do you sell hats?"}}
	if !slices.Equal(r.Input.Messages, wantIn) || r.Expected != nil {
		t.Errorf("t3 input %+v expected %s", r.Input.Messages, r.Expected)
	}
	if err := json.Unmarshal(r.Metadata["trace"], &meta); err != nil || meta["span_id"] != "a000000000000002" {
		t.Errorf("t3 span %v (%v)", meta, err)
	}
}

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		filter string
		want   []string
		errors int
	}{
		{`span.attributes["http.route"] == "/checkout"`, []string{t1}, 0},
		{`span.status == "error"`, []string{t2}, 0},
		{`span.duration_ms > 500.0`, []string{t1, t3}, 0},
		{`span.resource["deployment.environment"] == "prod" && span.kind == "server"`, []string{t2, t1}, 0},
		{`span.name.startsWith("POST ") && span.parent_span_id != ""`, []string{t3}, 0},
		{`span.start < timestamp("2026-01-02T10:30:00Z")`, []string{t1, t3}, 0},
		{`span.trace_id == "` + t3 + `"`, []string{t3}, 0},
		// A missing key is an evaluation error on the traces without it:
		// they are skipped and counted, the others still match.
		{`span.attributes["retries"] > 2`, []string{t2}, 3},
		{`"retries" in span.attributes && span.attributes["retries"] > 2`, []string{t2}, 0},
	} {
		t.Run(tc.filter, func(t *testing.T) {
			recs, st := read(t, spec.TracesDataset{Filter: tc.filter})
			if got := ids(recs); !slices.Equal(got, tc.want) {
				t.Errorf("ids %v, want %v", got, tc.want)
			}
			if st.FilterErrors != tc.errors {
				t.Errorf("filter errors %d, want %d", st.FilterErrors, tc.errors)
			}
		})
	}
}

func TestFilterCompileErrors(t *testing.T) {
	for _, tc := range []struct{ filter, want string }{
		{`span.nme == "x"`, "does not compile"},
		{`span.name`, "not bool"},
		{`span.name ==`, "does not compile"},
		{`spam.name == "x"`, "does not compile"},
	} {
		_, _, err := newTestSource(Options{}).Read(context.Background(), spec.TracesDataset{Service: "shop", File: "shop.jsonl", Filter: tc.filter}, "testdata")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("filter %q: error %v, want one saying %q", tc.filter, err, tc.want)
		}
	}
}

// TestFilterCostLimit: a filter over the cost limit fails on every trace,
// each skipped and counted, and the read itself succeeds.
func TestFilterCostLimit(t *testing.T) {
	d := spec.TracesDataset{Service: "shop", File: "shop.jsonl",
		Filter: `span.attributes.all(k, span.attributes.all(j, span.name.size() > 0))`}
	recs, st, err := newTestSource(Options{CostLimit: 5}).Read(context.Background(), d, "testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 || st.FilterErrors != 4 {
		t.Errorf("records %v, filter errors %d; want none and 4 (the traces in the window)", ids(recs), st.FilterErrors)
	}
}

func TestPolicy(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name string
		pol  spec.TracePolicy
		want []string
	}{
		// SHA-256 of the hex id, first 8 bytes over 2^64 (computed with
		// Python's hashlib): t1 0.0858, t2 0.2248, t3 0.4075.
		{"sample 0.3", spec.TracePolicy{Sample: f(0.3)}, []string{t2, t1}},
		{"sample 0.1", spec.TracePolicy{Sample: f(0.1)}, []string{t1}},
		{"sample 0", spec.TracePolicy{Sample: f(0)}, []string{}},
		{"sample 1", spec.TracePolicy{Sample: f(1)}, []string{t2, t1, t3}},
		{"errors only", spec.TracePolicy{ErrorsOnly: true}, []string{t2}},
		{"limit keeps the newest", spec.TracePolicy{Limit: 2}, []string{t2, t1}},
		{"limit after sampling", spec.TracePolicy{Limit: 1, Sample: f(0.1)}, []string{t1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, _ := read(t, spec.TracesDataset{Policy: &tc.pol})
			if got := ids(recs); !slices.Equal(got, tc.want) {
				t.Errorf("ids %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSampledIsAHash: the same ids are kept on every call, a higher rate
// keeps a superset, and the kept share is close to the rate.
func TestSampledIsAHash(t *testing.T) {
	const n = 20000
	kept3, kept6 := 0, 0
	for i := range n {
		id := fmt.Sprintf("%032x", i*7919+1)
		a, b := Sampled(id, 0.3), Sampled(id, 0.6)
		if a != Sampled(id, 0.3) {
			t.Fatalf("%s sampled differently twice", id)
		}
		if a && !b {
			t.Fatalf("%s kept at 0.3 but not at 0.6", id)
		}
		if a {
			kept3++
		}
		if b {
			kept6++
		}
	}
	for _, c := range []struct {
		kept int
		rate float64
	}{{kept3, 0.3}, {kept6, 0.6}} {
		if got := float64(c.kept) / n; got < c.rate-0.02 || got > c.rate+0.02 {
			t.Errorf("rate %v kept %.3f of the traces", c.rate, got)
		}
	}
}

func TestLookback(t *testing.T) {
	recs, st := read(t, spec.TracesDataset{Lookback: spec.Duration(96 * time.Hour)})
	if len(recs) != 4 || st.OutOfWindow != 0 {
		t.Errorf("96h lookback: %d records, %d out of window; want 4 and 0", len(recs), st.OutOfWindow)
	}
	recs, _ = read(t, spec.TracesDataset{Lookback: spec.Duration(90 * time.Minute)})
	if got := ids(recs); !slices.Equal(got, []string{t2}) {
		t.Errorf("90m lookback: %v, want only t2 (11:00)", got)
	}
}

// TestDirectory: a directory's files are read together (a trace split
// across files is one trace); hidden files are not read.
func TestDirectory(t *testing.T) {
	b, err := os.ReadFile("testdata/shop.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSpace(string(b)), "\n")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "traces-1.json"), []byte(strings.Join(lines[:2], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "traces-2.json"), []byte(strings.Join(lines[2:], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".partial"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, st, err := newTestSource(Options{}).Read(context.Background(), spec.TracesDataset{Service: "shop", File: dir}, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(recs); !slices.Equal(got, []string{t2, t1, t3}) || st.Traces != 5 {
		t.Errorf("ids %v (%d traces), want t2 t1 t3 of 5", got, st.Traces)
	}
}

func TestFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `{"resourceSpans":[]}`
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.jsonl"), "missing.jsonl: no such file"},
		{write("bad.jsonl", good+"\n{\"resourceSpans\": [\n"), "bad.jsonl:2: not OTLP JSON"},
		{write("two.jsonl", good+" "+good+"\n"), "two.jsonl:1: more than one JSON value"},
		{write("id.jsonl", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"xyz","spanId":"00f067aa0ba902b7"}]}]}]}`), `id.jsonl:1: span "": trace id: id "xyz"`},
		{write("int.jsonl", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"`+t1+`","startTimeUnixNano":"soon"}]}]}]}`), `int.jsonl:1: not OTLP JSON`},
		{func() string { p := filepath.Join(dir, "empty"); os.Mkdir(p, 0o755); return p }(), "holds no files"},
	} {
		_, _, err := newTestSource(Options{}).Read(context.Background(), spec.TracesDataset{Service: "shop", File: tc.path}, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", filepath.Base(tc.path), err, tc.want)
		}
	}
}

// TestQueryErrors: an unreachable backend and a URL that is not Jaeger's
// query API say what and where.
func TestQueryErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	notJaeger := httptest.NewServer(http.NotFoundHandler())
	defer notJaeger.Close()
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>hello</html>")) }))
	defer html.Close()
	for _, tc := range []struct{ url, want string }{
		{closed, "querying Jaeger at " + closed + "/api/v3/traces?"},
		{notJaeger.URL, "answered 404 Not Found: \"404 page not found\" (is url Jaeger's query endpoint"},
		{html.URL, "is not the OTLP JSON of /api/v3/traces"},
		{"ftp://example.invalid", "is not an http(s) URL"},
	} {
		_, _, err := newTestSource(Options{}).Read(context.Background(), spec.TracesDataset{Service: "shop", URL: tc.url}, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.url, err, tc.want)
		}
	}
}

// TestFileRoot: with FileRoot (a server), traces.file reads only inside
// it: no absolute path, no .., no symlink out.
func TestFileRoot(t *testing.T) {
	root := t.TempDir()
	b, err := os.ReadFile("testdata/shop.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "shop.jsonl"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.jsonl"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.jsonl"), filepath.Join(root, "link.jsonl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "linkdir")); err != nil {
		t.Fatal(err)
	}
	src := newTestSource(Options{FileRoot: root})
	recs, _, err := src.Read(context.Background(), spec.TracesDataset{Service: "shop", File: "shop.jsonl"}, "/elsewhere")
	if err != nil || len(recs) != 3 {
		t.Fatalf("inside the root: %d records, %v", len(recs), err)
	}
	for _, f := range []string{filepath.Join(outside, "secret.jsonl"), "../" + filepath.Base(outside) + "/secret.jsonl", "link.jsonl", "linkdir/secret.jsonl", "linkdir"} {
		recs, _, err := src.Read(context.Background(), spec.TracesDataset{Service: "shop", File: f}, "")
		if err == nil {
			t.Errorf("traces.file %q read %d records from outside the root", f, len(recs))
		}
	}
}

// TestAllowURL: with AllowURL (a server), traces.url and redirects are
// checked before anything is fetched from them.
func TestAllowURL(t *testing.T) {
	hits := 0
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer forbidden.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, forbidden.URL+r.URL.RequestURI(), http.StatusFound)
	}))
	defer redirect.Close()
	allowed := redirect.URL
	src := newTestSource(Options{AllowURL: func(u *url.URL) error {
		if "http://"+u.Host != allowed {
			return fmt.Errorf("%s is not a configured trace backend", u.Host)
		}
		return nil
	}})
	for _, tc := range []struct{ url, want string }{
		{forbidden.URL, "is not a configured trace backend"},
		{redirect.URL, "redirected to " + forbidden.URL},
	} {
		_, _, err := src.Read(context.Background(), spec.TracesDataset{Service: "shop", URL: tc.url}, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.url, err, tc.want)
		}
	}
	if hits != 0 {
		t.Errorf("the refused backend was asked %d times", hits)
	}
}
