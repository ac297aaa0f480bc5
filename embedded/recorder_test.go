package embedded

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"evals.si/engine"
	"evals.si/spec"
	"evals.si/store"
)

// failStore makes the app's real SQLite store refuse writes with a
// trigger, for the trials of one record: at the trial's start (its insert)
// or at its end (the update that stamps finished_at).
func failStore(t *testing.T, a *App, recordID, at string) {
	t.Helper()
	db, err := sql.Open("sqlite", a.Store().Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	on := "BEFORE INSERT ON trials WHEN NEW.record_id = '" + recordID + "'"
	if at == "end" {
		on = "BEFORE UPDATE ON trials WHEN NEW.record_id = '" + recordID + "' AND NEW.finished_at IS NOT NULL"
	}
	if _, err := db.Exec("CREATE TRIGGER fail_" + at + " " + on + " BEGIN SELECT RAISE(ABORT, 'the disk is on fire'); END"); err != nil {
		t.Fatal(err)
	}
}

func plainSpec(t *testing.T) *spec.File {
	t.Helper()
	y := `name: store-fails
retries: 1
dataset:
  records:
    - {id: a, input: qa, expected: "1"}
    - {id: doomed, input: qd, expected: "1"}
    - {id: c, input: qc, expected: "1"}
target:
  connector: scripted
  model: m
  script: {default: [{content: "1"}]}
evaluators: [exact-match]
`
	p := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := spec.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Spec.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestStoreFailureShows: when the store cannot register a run's trials,
// the run does not start and the error names the cause; when it cannot
// record a trial's end, the trial is errored (kind store) in the summary,
// so the run exits 3, and the run is failed in the store with an error
// saying so; the other trials are scored as usual and the mean is not
// silently taken over fewer trials.
func TestStoreFailureShows(t *testing.T) {
	t.Run("start", func(t *testing.T) {
		a := openApp(t)
		failStore(t, a, "doomed", "start")
		_, err := a.Run(context.Background(), plainSpec(t), RunOptions{})
		if err == nil || !strings.Contains(err.Error(), "the disk is on fire") {
			t.Fatalf("run: %v, want the store's refusal", err)
		}
	})
	for _, at := range []string{"end"} {
		t.Run(at, func(t *testing.T) {
			a := openApp(t)
			failStore(t, a, "doomed", at)
			ctx := context.Background()
			sum, err := a.Run(ctx, plainSpec(t), RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Errored != 1 || sum.ErrorsByKind[engine.ErrorKindStore] != 1 || sum.Status != engine.StatusFailed {
				t.Errorf("summary: errored %d, by kind %v, status %s; want 1 store error, failed", sum.Errored, sum.ErrorsByKind, sum.Status)
			}
			if got := sum.Aggregate.Errored; got != 1 {
				t.Errorf("exact-match counts %d errored trials, want the unrecorded one", got)
			}
			if got := sum.Scores["exact-match"]; got != 1 {
				t.Errorf("exact-match = %v over the recorded trials, want 1", got)
			}
			run, err := a.Store().GetRun(ctx, sum.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if run.Status != store.RunFailed || !strings.Contains(run.Error, "could not be recorded") || !strings.Contains(run.Error, "the disk is on fire") {
				t.Errorf("stored run: status %s, error %q", run.Status, run.Error)
			}
		})
	}
}

// runSecrets finds every worker variable a spec names, wherever it names
// one: env_from, *_env maps, api_key_env, and a connector's default key.
func TestRunSecrets(t *testing.T) {
	s := &spec.Spec{
		Target: spec.Target{
			ModelRef: spec.ModelRef{Connector: "openai", APIKeyEnv: "TARGET_KEY"},
			Agent: &spec.Agent{
				CLI:  &spec.CLIAgent{EnvFrom: map[string]string{"KEY": "CLI_KEY"}},
				HTTP: &spec.HTTPAgent{HeadersEnv: map[string]string{"Authorization": "HTTP_TOKEN"}},
			},
		},
		Judge: &spec.ModelRef{Connector: "anthropic"},
	}
	env := map[string]string{
		"TARGET_KEY": "target-secret", "CLI_KEY": "cli-secret", "HTTP_TOKEN": "http-secret",
		"ANTHROPIC_API_KEY": "judge-secret", "OPENAI_API_KEY": "not-named-by-the-spec",
	}
	got := s.SecretValues(func(k string) string { return env[k] })
	slices.Sort(got)
	if want := []string{"cli-secret", "http-secret", "judge-secret", "target-secret"}; !slices.Equal(got, want) {
		t.Errorf("SecretValues = %v, want %v", got, want)
	}
}

// A run whose records hold one of its secrets is stored with the secret
// redacted and still resumes: the dataset is compared as the store keeps it.
func TestResumeWithRedactedRecords(t *testing.T) {
	ctx := context.Background()
	const secret = "resume-secret-0123456789"
	t.Setenv("EVALSI_RESUME_SECRET", secret)
	dir := t.TempDir()
	f, data := writeResumeSpec(t, dir, 6)
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, []byte(strings.ReplaceAll(string(b), `"q1"`, `"q1 `+secret+`"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	f.Spec.Target.APIKeyEnv = "EVALSI_RESUME_SECRET" // the spec names it: a secret of the run
	a := openApp(t)
	first := interruptedRun(t, a, f, 2)
	sum, err := a.Resume(ctx, first.RunID, RunOptions{})
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if sum.Status != engine.StatusCompleted {
		t.Errorf("resumed status %s", sum.Status)
	}
	trials, err := a.Store().ListTrials(ctx, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range trials {
		if strings.Contains(string(tr.Record), secret) {
			t.Errorf("trial %s stores its record with the secret: %s", tr.ID, tr.Record)
		}
	}
}
