package storetest

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// secret has characters JSON and Go quoting escape, so its stored forms
// differ from it; marker is a part of it no stored text may hold either.
const (
	secret = `sk-test-"quoted"&<tag>\back-0123456789`
	marker = "sk-test-"
)

// redactionEverywhere writes the secret through every API that keeps text
// (runs, records, events on every path, results, completions, scores'
// details, evaluations, artifacts across read boundaries, blobs, worker
// names, requeue errors), then reads everything back: no read holds the
// secret, and every JSON is still JSON. The backends' own tests scan what
// they wrote to disk or the database as well.
func redactionEverywhere(t *testing.T, s *suite) {
	ctx := t.Context()
	s.b.AddSecrets(secret, "short") // too short to redact: ignored
	run, err := s.b.CreateRun(ctx, store.RunInput{Name: "name " + secret, Spec: &spec.Spec{Name: "run " + secret},
		SpecPath: "/specs/" + secret, DatasetVersion: "v-" + secret})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(map[string]any{"id": "r", "input": "use " + secret})
	s.must("Enqueue", s.b.Enqueue(ctx, run.ID, []store.TrialInput{{RecordID: "r", Record: rec}, {RecordID: "r2", Record: rec}}))
	l, err := s.b.Lease(ctx, store.LeaseRequest{Worker: "worker " + secret, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", store.InlineLimit) + secret // beyond InlineLimit: a blob
	s.must("AppendEvent", s.b.AppendEvent(ctx, l.TrialID, logEv("the key is "+secret)))
	s.must("AppendEvents", s.b.AppendEvents(ctx, l.TrialID, []trajectory.Event{
		{Kind: trajectory.KindToolResult, ToolResult: &trajectory.ToolResult{CallID: "c", Output: big}},
	}))
	s.must("AppendLeased", s.b.AppendLeased(ctx, l, []trajectory.Event{
		{Kind: trajectory.KindChecker, Checker: &trajectory.Checker{Output: "checker saw " + secret}},
	}))
	details, _ := json.Marshal(map[string]string{"rationale": "found " + secret})
	s.must("PutScores", s.b.PutScores(ctx, l.TrialID, []store.Score{{Name: "judge", Value: 1, Details: details}}))
	diff := strings.Repeat("+line\n", 20000) + "+KEY=" + secret + "\n" + strings.Repeat("+more\n", 20000)
	if _, err := s.b.PutArtifact(ctx, l.TrialID, "diff.patch", "text/x-diff", iotest.HalfReader(strings.NewReader(diff))); err != nil {
		t.Fatal(err)
	}
	blob, err := s.b.PutBlob(ctx, []byte("blob "+secret))
	if err != nil {
		t.Fatal(err)
	}
	iso, _ := json.Marshal(map[string]string{"note": secret})
	s.must("Complete", s.b.Complete(ctx, l, store.Completion{
		Result: store.TrialResult{Status: store.TrialErrored, ErrorKind: "agent", Error: "agent failed: " + secret,
			Output: big, Isolation: iso},
		Scores:      []store.Score{{Name: "judge-2", Value: 0, Details: details}},
		Evaluations: json.RawMessage(`[{"evaluator":"y","details":` + string(details) + `}]`),
		Artifacts:   []store.ArtifactInput{{Name: "log", MediaType: "text/plain", Data: []byte("log " + secret)}},
		Retry:       true,
	}))
	// The retry, leased and lost: its requeue error names the worker.
	l2, err := s.b.Lease(ctx, store.LeaseRequest{Worker: "worker " + secret, TTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.must("PutEvaluations", s.b.PutEvaluations(ctx, l2.TrialID, json.RawMessage(`[{"evaluator":"x","details":`+string(details)+`}]`)))
	if _, err := s.b.Requeue(ctx, store.RequeueRequest{Expired: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	sum, _ := json.Marshal(map[string]string{"name": secret})
	s.must("FinishRun", s.b.FinishRun(ctx, run.ID, store.RunFailed, sum, "run failed: "+secret))

	// Read everything back.
	var texts []string
	add := func(what string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		texts = append(texts, what+": "+string(b))
	}
	addJSON := func(what string, b []byte) {
		if len(b) > 0 && !json.Valid(b) {
			t.Errorf("%s is no longer valid JSON: %s", what, b)
		}
		texts = append(texts, what+": "+string(b))
	}
	gotRun, err := s.b.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	add("run", gotRun)
	addJSON("run spec", gotRun.Spec)
	addJSON("run summary", gotRun.Summary)
	attempts, err := s.b.ListAttempts(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range attempts {
		add("attempt "+a.ID, a)
		addJSON("record of "+a.ID, a.Record)
		addJSON("isolation of "+a.ID, a.Isolation)
		es, err := s.b.Events(ctx, a.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		add("events of "+a.ID, es)
		sc, err := s.b.TrialScores(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range sc {
			addJSON("score details of "+a.ID, x.Details)
		}
		arts, err := s.b.Artifacts(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, art := range arts {
			b, err := s.b.GetBlob(ctx, art.Digest)
			if err != nil {
				t.Fatal(err)
			}
			texts = append(texts, "artifact "+art.Name+": "+string(b))
		}
	}
	evals, err := s.b.Evaluations(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	for id, e := range evals {
		addJSON("evaluations of "+id, e)
	}
	b, err := s.b.GetBlob(ctx, blob)
	if err != nil {
		t.Fatal(err)
	}
	texts = append(texts, "blob: "+string(b))
	texts = append(texts, "lease worker: "+l2.Worker)

	for _, text := range texts {
		for _, f := range []string{secret, marker, jsonEscaped(secret)} {
			if strings.Contains(text, f) {
				t.Errorf("read back with the secret (%q): %.200s", f, text)
			}
		}
	}
	if !strings.Contains(strings.Join(texts, "\n"), store.Redacted) {
		t.Error("nothing read back says " + store.Redacted)
	}
	// The artifact read back is the diff with the secret replaced, exactly.
	arts, err := s.b.Artifacts(ctx, l.TrialID)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range arts {
		if a.Name != "diff.patch" {
			continue
		}
		rc, err := s.b.OpenBlob(ctx, a.Digest)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if want := strings.ReplaceAll(diff, secret, store.Redacted); string(got) != want {
			t.Errorf("diff artifact read back differs from the redacted diff (%d bytes, want %d)", len(got), len(want))
		}
	}
	if got := s.b.RedactJSON([]byte(`{"a":` + mustJSON(secret) + `}`)); bytes.Contains(got, []byte(marker)) || !json.Valid(got) {
		t.Errorf("RedactJSON = %s", got)
	}
}

func jsonEscaped(v string) string {
	b, _ := json.Marshal(v)
	return string(b[1 : len(b)-1])
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// textAnyBytes: text an agent or a dataset can produce (NUL bytes, invalid
// UTF-8, control characters) is accepted everywhere, never an error; it
// reads back as written, or with U+FFFD for what the backend cannot hold.
func textAnyBytes(t *testing.T, s *suite) {
	ctx := t.Context()
	odd := "a\x00b\xffc\x01d\u2028e"
	run, err := s.b.CreateRun(ctx, store.RunInput{Name: odd, SpecPath: odd, Project: odd, DatasetVersion: odd})
	if err != nil {
		t.Fatalf("CreateRun with odd text: %v", err)
	}
	s.must("Enqueue", s.b.Enqueue(ctx, run.ID, []store.TrialInput{{RecordID: "rec" + odd, Record: json.RawMessage(`{"s":"\u0000"}`)}}))
	l, err := s.b.Lease(ctx, store.LeaseRequest{Worker: odd, TTL: time.Hour, Runs: []string{run.ID}})
	if err != nil {
		t.Fatal(err)
	}
	s.must("AppendLeased", s.b.AppendLeased(ctx, l, []trajectory.Event{logEv(odd)}))
	s.must("PutScores", s.b.PutScores(ctx, l.TrialID, []store.Score{{Name: "s" + odd, Value: 1}}))
	if _, err := s.b.PutArtifact(ctx, l.TrialID, "n"+odd, odd, strings.NewReader(odd)); err != nil {
		t.Fatalf("PutArtifact with odd text: %v", err)
	}
	s.must("Complete", s.b.Complete(ctx, l, store.Completion{Result: store.TrialResult{
		Status: store.TrialErrored, ErrorKind: odd, Error: odd, Output: odd}}))

	gotRun, err := s.b.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.b.GetTrial(ctx, l.TrialID)
	if err != nil {
		t.Fatal(err)
	}
	es, err := s.b.Events(ctx, l.TrialID, 0, 0)
	if err != nil || len(es) != 1 {
		t.Fatalf("Events = %v, %v", es, err)
	}
	for what, got := range map[string]string{
		"run name": gotRun.Name, "spec path": gotRun.SpecPath, "project": gotRun.Project, "dataset version": gotRun.DatasetVersion,
		"record id": strings.TrimPrefix(tr.RecordID, "rec"), "error kind": tr.ErrorKind, "error": tr.Error, "output": tr.Output,
		"lease owner": tr.LeaseOwner,
	} {
		if !heldAsWritten(got, odd) {
			t.Errorf("%s read back as %q, want %q (or with U+FFFD for what the backend cannot hold)", what, got, odd)
		}
	}
	// Through JSON, invalid UTF-8 is U+FFFD on every backend.
	if want := strings.ToValidUTF8(odd, "\uFFFD"); es[0].Log.Text != want {
		t.Errorf("event text read back as %q, want %q", es[0].Log.Text, want)
	}
}

// heldAsWritten: got is want, or want with invalid UTF-8 and NUL bytes
// replaced by U+FFFD.
func heldAsWritten(got, want string) bool {
	return got == want || got == strings.ReplaceAll(strings.ToValidUTF8(want, "\uFFFD"), "\x00", "\uFFFD")
}
