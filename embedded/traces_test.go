package embedded_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"evals.si/dataset/traces"
	"evals.si/embedded"
	"evals.si/engine"
	"evals.si/internal/testenv/jaegertest"
	"evals.si/spec"
)

const producerSpec = `name: capitals-production
dataset:
  records:
    - {id: france, input: "What is the capital of France?", expected: Paris}
    - {id: japan, input: "What is the capital of Japan?", expected: Tokyo}
    - {id: peru, input: "What is the capital of Peru?", expected: Lima}
target:
  connector: scripted
  model: scripted-capitals
  script:
    records:
      france: [{content: "Paris"}]
      japan: [{content: "Tokyo"}]
      peru: [{content: "Lima"}]
evaluators: [exact-match]
`

// The replay's records are the first run's trials, read back from Jaeger:
// ids are trace ids, so its script answers by the question.
const replaySpec = `name: capitals-from-traces
dataset:
  traces:
    service: evalsi
    url: QUERY
    filter: 'span.name.startsWith("invoke_agent ") && span.attributes["evalsi.record_id"] != "peru"'
target:
  connector: scripted
  model: scripted-capitals
  script:
    rules:
      - {contains: France, replies: [{content: "Paris"}]}
      - {contains: Japan, replies: [{content: "Tokyo"}]}
    default: [{content: "no idea"}]
evaluators: [exact-match]
`

// TestTracesRoundTrip: a run exports its spans to a real Jaeger over OTLP
// with content capture on; a traces dataset over that Jaeger has exactly
// the trials the filter selects (input the record's, expected the
// output the run gave), and a run over it completes.
func TestTracesRoundTrip(t *testing.T) {
	otlp, query := jaegertest.Start(t)
	// telemetry reads the process environment (os.Getenv).
	for k, v := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":                        otlp,
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":                 "",
		"OTEL_EXPORTER_OTLP_PROTOCOL":                        "http/protobuf",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL":                 "",
		"OTEL_SERVICE_NAME":                                  "evalsi",
		"OTEL_RESOURCE_ATTRIBUTES":                           "",
		"OTEL_SDK_DISABLED":                                  "",
		"OTEL_TRACES_EXPORTER":                               "",
		"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
	} {
		t.Setenv(k, v)
	}
	ctx := context.Background()
	dir := t.TempDir()
	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	// What the lead wires into embedded.Open: the traces source.
	src := traces.NewSource(traces.Options{Logger: slog.New(slog.DiscardHandler)})
	app.Datasets().ServeTraces(src)

	sum := runTracesSpec(t, app, filepath.Join(dir, "producer.yaml"), producerSpec)
	if sum.Records != 3 {
		t.Fatalf("producer run: %d records", sum.Records)
	}

	// The run's spans were flushed when it ended; Jaeger stores them
	// through its exporter's queue: wait until the three trial traces and
	// the run's own are there.
	d := spec.TracesDataset{Service: "evalsi", URL: query}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		_, st, err := src.Read(waitCtx, d, "")
		if err == nil && st.Traces >= 4 {
			break
		}
		select {
		case <-waitCtx.Done():
			t.Fatalf("Jaeger did not store the run's 4 traces (last read: %+v, %v)", st, err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// Exactly the trials the filter selects, built from the trial spans.
	d.Filter = `span.name.startsWith("invoke_agent ") && span.attributes["evalsi.record_id"] != "peru"`
	recs, st, err := src.Read(ctx, d, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range recs {
		var meta map[string]string
		if err := json.Unmarshal(r.Metadata["trace"], &meta); err != nil || meta["trace_id"] != r.ID {
			t.Fatalf("record %s metadata.trace %s (%v)", r.ID, r.Metadata["trace"], err)
		}
		if len(r.Input.Messages) != 1 || r.Input.Messages[0].Role != "user" {
			t.Fatalf("record %s (%s) input %+v", r.ID, meta["name"], r.Input)
		}
		if meta["name"] != "invoke_agent scripted-capitals" {
			t.Errorf("record %s from span %q, want the trial's invoke_agent span", r.ID, meta["name"])
		}
		got[r.Input.Messages[0].Content] = string(r.Expected)
	}
	want := map[string]string{
		"What is the capital of France?": `"Paris"`,
		"What is the capital of Japan?":  `"Tokyo"`,
	}
	if len(got) != len(want) || len(recs) != 2 {
		t.Fatalf("records %v, want %v (stats %+v)", got, want, st)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	// The filter dropped the run's own trace and peru's.
	if st.Filtered != 2 || st.NoInput != 0 {
		t.Errorf("stats %+v: want the run's trace and peru's filtered", st)
	}

	// A run over those records completes and matches production's answers.
	// Its own spans are not exported (that would only add traces).
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	replayPath := filepath.Join(dir, "replay.yaml")
	sum = runTracesSpec(t, app, replayPath, strings.ReplaceAll(replaySpec, "QUERY", query))
	if sum.Records != 2 || sum.Scores["exact-match"] != 1 {
		t.Fatalf("replay: %d records, scores %v", sum.Records, sum.Scores)
	}
	ids := []string{}
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	trials, err := app.Store().ListTrials(ctx, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	for _, tr := range trials {
		ran = append(ran, tr.RecordID)
	}
	slices.Sort(ran)
	if !slices.Equal(ran, ids) {
		t.Errorf("replay ran records %v, want the trace ids %v", ran, ids)
	}
}

func runTracesSpec(t *testing.T, app *embedded.App, path, text string) *engine.Summary {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Spec.Validate(); err != nil {
		t.Fatal(err)
	}
	sum, err := app.Run(context.Background(), f, embedded.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Status != engine.StatusCompleted || sum.Errored != 0 {
		t.Fatalf("run %s: status %s, %d errored", path, sum.Status, sum.Errored)
	}
	return sum
}
