package store

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"evals.si/spec"
	"evals.si/trajectory"
)

// secret has characters JSON and Go quoting escape, so its stored forms
// differ from it.
const secret = `sk-test-"quoted"&<tag>\back-0123456789`

// TestSecretsNeverStored writes the secret through every store API that
// keeps text, then scans every file the store wrote (the database, its
// WAL, the blobs) for the secret in any of its forms; the values read back
// are redacted and stay valid JSON.
func TestSecretsNeverStored(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, filepath.Join(dir, "evalsi.db"))
	if err != nil {
		t.Fatal(err)
	}
	s.AddSecrets(secret, "short") // too short to redact: ignored
	run, err := s.CreateRun(ctx, RunInput{Spec: &spec.Spec{Name: "run " + secret}})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(map[string]any{"id": "r", "input": "use " + secret})
	tr, err := s.StartTrial(ctx, TrialInput{RunID: run.ID, RecordID: "r", Record: rec})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", InlineLimit) + secret // beyond InlineLimit: a blob
	evs := []trajectory.Event{
		logEvent("the key is " + secret),
		{Kind: trajectory.KindToolResult, ToolResult: &trajectory.ToolResult{CallID: "c", Output: big}},
		{Kind: trajectory.KindChecker, Checker: &trajectory.Checker{Output: "checker saw " + secret}},
	}
	if err := s.AppendEvent(ctx, tr.ID, evs[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(ctx, tr.ID, evs[1:]); err != nil {
		t.Fatal(err)
	}
	details, _ := json.Marshal(map[string]string{"rationale": "found " + secret})
	if err := s.PutScores(ctx, tr.ID, []Score{{Name: "judge", Value: 1, Details: details}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEvaluations(ctx, tr.ID, json.RawMessage(`[{"evaluator":"x","details":`+string(details)+`}]`)); err != nil {
		t.Fatal(err)
	}
	// The diff: the secret across the blob writer's read boundaries.
	diff := strings.Repeat("+line\n", 20000) + "+KEY=" + secret + "\n" + strings.Repeat("+more\n", 20000)
	if _, err := s.PutArtifact(ctx, tr.ID, "diff.patch", "text/x-diff", iotest.HalfReader(strings.NewReader(diff))); err != nil {
		t.Fatal(err)
	}
	iso, _ := json.Marshal(map[string]string{"note": secret})
	if err := s.FinishTrial(ctx, tr.ID, TrialResult{Status: TrialErrored, ErrorKind: "agent", Error: "agent failed: " + secret,
		Output: big, Isolation: iso}); err != nil {
		t.Fatal(err)
	}
	sum, _ := json.Marshal(map[string]string{"name": secret})
	if err := s.FinishRun(ctx, run.ID, RunFailed, sum, "run failed: "+secret); err != nil {
		t.Fatal(err)
	}

	// Read back: redacted, and every JSON still JSON.
	got, err := s.GetTrial(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got.Output, Redacted) || got.Error != "agent failed: "+Redacted || !json.Valid(got.Record) || !json.Valid(got.Isolation) {
		t.Errorf("trial read back: error %q, output ends %q, record %s, isolation %s", got.Error, got.Output[len(got.Output)-20:], got.Record, got.Isolation)
	}
	stored, err := s.Events(ctx, tr.ID, 0, 0)
	if err != nil || len(stored) != 3 {
		t.Fatalf("events: %d, %v", len(stored), err)
	}
	if stored[0].Log.Text != "the key is "+Redacted || stored[2].Checker.Output != "checker saw "+Redacted {
		t.Errorf("events read back: %q, %q", stored[0].Log.Text, stored[2].Checker.Output)
	}
	arts, err := s.Artifacts(ctx, tr.ID)
	if err != nil || len(arts) != 1 {
		t.Fatalf("artifacts: %v %v", arts, err)
	}
	b, err := s.GetBlob(ctx, arts[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.ReplaceAll(diff, secret, Redacted); string(b) != want {
		t.Errorf("diff artifact read back differs from the redacted diff (%d bytes, want %d)", len(b), len(want))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	scanForSecret(t, dir, secret)
}

// scanForSecret fails if any file under dir holds value, raw or in any
// form the store would write it.
func scanForSecret(t *testing.T, dir, value string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		for _, f := range append(secretForms(value), "sk-test-") {
			if bytes.Contains(b, []byte(f)) {
				t.Errorf("%s holds %q", p, f)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Fatalf("scanned %d files under %s; want the database, its WAL and blobs", n, dir)
	}
}

// The JSON a secret matched outside any string in (a number equal to it)
// stays valid: then only strings are redacted.
func TestRedactJSONStaysValid(t *testing.T) {
	s := &Store{}
	s.AddSecrets("1234567")
	r := &s.redact
	for _, in := range []string{`{"tokens":1234567,"text":"a 1234567 b"}`, `["1234567", 12345678]`, `{"1234567":1}`} {
		out := r.json([]byte(in))
		if !json.Valid(out) || bytes.Contains(out, []byte(`"a 1234567 b"`)) || bytes.Contains(out, []byte(`"1234567"`)) {
			t.Errorf("%s → %s", in, out)
		}
	}
}

// The streaming redactor finds secrets however the input is split, and
// prefers the longest secret at a position.
func TestRedactReader(t *testing.T) {
	s := &Store{}
	s.AddSecrets("abcdef", "abcdefgh", "zzzzzzzz")
	cases := []struct{ in, want string }{
		{"abcdefgh", Redacted},
		{"xxabcdefxx", "xx" + Redacted + "xx"},
		{"abcdeabcdef", "abcde" + Redacted},
		{"zzzzzzzzzz", Redacted + "zz"},
		{"no secret here", "no secret here"},
		{"abcde", "abcde"},
		{strings.Repeat("a", 70000) + "abcdefgh" + "tail", strings.Repeat("a", 70000) + Redacted + "tail"},
	}
	for _, tc := range cases {
		for name, rd := range map[string]io.Reader{
			"whole":    strings.NewReader(tc.in),
			"one byte": iotest.OneByteReader(strings.NewReader(tc.in)),
		} {
			b, err := io.ReadAll(s.redact.reader(rd))
			if err != nil || string(b) != tc.want {
				t.Errorf("%s %.20q: got %.40q, %v; want %.40q", name, tc.in, b, err, tc.want)
			}
		}
	}
}
