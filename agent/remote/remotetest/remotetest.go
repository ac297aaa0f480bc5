// Package remotetest is what the tests of the remote agent kinds (a2a, mcp,
// responses, http) share: running an example spec end to end through
// embedded.App against a test peer, a scripted user simulator, and an
// event collector. Only tests import it.
package remotetest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"evals.si/embedded"
	"evals.si/internal/testenv"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Example runs examples/agents/<name> (found from the test's directory,
// agent/<kind>) with from (the example's agent URL)
// replaced by to (the test peer's) and each edit ({old, new}) applied, and
// returns the summary scores and the first trial's events. A from or edit
// the example does not contain fails the test: the example changed.
func Example(t *testing.T, name, from, to string, edits ...[2]string) (map[string]float64, []trajectory.Event) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "agents", name))
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	for _, e := range append([][2]string{{from, to}}, edits...) {
		if !strings.Contains(y, e[0]) {
			t.Fatalf("%s does not contain %q", name, e[0])
		}
		y = strings.ReplaceAll(y, e[0], e[1])
	}
	return Spec(t, name, y)
}

// Spec runs the spec y (named name) through a fresh embedded.App and
// returns the summary scores and the first trial's events. The task's
// checker runs in a bubblewrap sandbox, so a machine without bwrap skips
// (fails under EVALSI_STRICT=1); an errored trial fails the test.
func Spec(t *testing.T, name, y string) (map[string]float64, []trajectory.Event) {
	t.Helper()
	if !onPath("bwrap") {
		testenv.Missing(t, "bwrap", "the task's checker runs in a bubblewrap sandbox")
	}
	dir := t.TempDir()
	f, err := spec.Parse(filepath.Join(dir, name), []byte(y))
	if err != nil {
		t.Fatalf("spec: %v\n%s", err, y)
	}
	f.Dir = dir
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx := context.Background()
	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"), StateDir: filepath.Join(dir, "state"), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	sum, err := app.Run(ctx, f, embedded.RunOptions{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	d, err := app.RunDetail(ctx, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errored != 0 || len(d.Trials) == 0 {
		for _, tr := range d.Trials {
			t.Logf("trial %s: %s %s", tr.RecordID, tr.Status, tr.Error)
		}
		t.Fatalf("%d trial(s) errored: %v", sum.Errored, sum.ErrorsByKind)
	}
	evs, err := app.Store().Events(ctx, d.Trials[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sum.Scores, evs
}

// Kinds is the events' kinds joined by commas ("message,stop").
func Kinds(evs []trajectory.Event) string {
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, string(e.Kind))
	}
	return strings.Join(kinds, ",")
}

// Checked reports whether evs hold a passing checker event.
func Checked(evs []trajectory.Event) bool {
	for _, e := range evs {
		if e.Kind == trajectory.KindChecker && e.Checker != nil && e.Checker.Pass {
			return true
		}
	}
	return false
}

// User is a user simulator that gives Replies in order, then is done. It
// keeps the conversations it was shown in Seen.
type User struct {
	Replies []string
	Seen    [][]trajectory.Message
}

// Reply implements agent.User.
func (u *User) Reply(ctx context.Context, conv []trajectory.Message) (string, bool, error) {
	u.Seen = append(u.Seen, slices.Clone(conv))
	if len(u.Replies) == 0 {
		return "", true, nil
	}
	r := u.Replies[0]
	u.Replies = u.Replies[1:]
	return r, false, nil
}

// Collect returns a sink and the events it records.
func Collect() (*[]trajectory.Event, trajectory.Sink) {
	var mu sync.Mutex
	var evs []trajectory.Event
	return &evs, trajectory.SinkFunc(func(e trajectory.Event) error {
		mu.Lock()
		defer mu.Unlock()
		evs = append(evs, e)
		return nil
	})
}

// Env is a Getenv that reads m.
func Env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// onPath reports whether an executable named name is on PATH (without
// os/exec, which only sandbox rungs import).
func onPath(name string) bool {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return true
		}
	}
	return false
}
