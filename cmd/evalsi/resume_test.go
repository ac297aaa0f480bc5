package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/moby/sys/mountinfo"

	"evals.si/internal/testenv"
	"evals.si/modelserver"
	"evals.si/sandbox/docker"
	"evals.si/spec"
	"evals.si/store"
)

// buildEvalsi builds the evalsi binary, as users run it, into a temp dir.
func buildEvalsi(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "evalsi")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building evalsi: %v\n%s", err, out)
	}
	return bin
}

// slowModel serves the scripted model server on loopback, each answer
// delayed 10–40 ms (by prompt, so deterministic) so that a run of many
// trials lasts long enough to be killed in the middle.
func slowModel(t *testing.T, script *spec.Script) string {
	t.Helper()
	srv := modelserver.New(script, nil)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := readAllRestore(r)
		f := fnv.New32a()
		f.Write(body)
		select {
		case <-time.After(time.Duration(10+f.Sum32()%30) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		srv.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

func readAllRestore(r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(r.Body)
	r.Body.Close()
	r.Body = nopCloser{bytes.NewReader(buf.Bytes())}
	return buf.Bytes(), err
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// resumeScript answers n records "[qNN] What is i + i?": right, wrong or
// right within a sentence, by record, so that scores differ.
func resumeScript(n int) *spec.Script {
	s := &spec.Script{}
	for i := range n {
		answer := fmt.Sprint(2 * i)
		switch i % 3 {
		case 1:
			answer = fmt.Sprint(2*i + 1)
		case 2:
			answer = fmt.Sprintf("It is %d.", 2*i)
		}
		s.Rules = append(s.Rules, spec.ScriptRule{Contains: fmt.Sprintf("[q%02d]", i), Replies: []spec.ScriptReply{
			{Content: answer, InputTokens: 10 + i, OutputTokens: 1 + i%5},
		}})
	}
	return s
}

// resumeSpec writes a plain model eval of n records × 3 trials.
func resumeSpec(t *testing.T, addr string, n int) string {
	t.Helper()
	recs := make([]string, n)
	for i := range n {
		recs[i] = fmt.Sprintf(`{"id": "r%02d", "input": "[q%02d] What is %d + %d?", "expected": "%d"}`, i, i, i, i, 2*i)
	}
	return writeResumeSpec(t, addr, "resume-test", 3, recs, "evaluators: [exact-match, includes]\n")
}

// writeResumeSpec writes a spec of records × trials whose target is the
// model server at addr, followed by rest, and its dataset as a JSONL file
// next to it (a relative path, which resume must resolve against the
// spec's directory, not the working directory).
func writeResumeSpec(t *testing.T, addr, name string, trials int, records []string, rest string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "records.jsonl"), []byte(strings.Join(records, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	y := fmt.Sprintf(`name: %s
trials: %d
concurrency: 4
dataset:
  path: records.jsonl
target:
  connector: openai
  model: gpt-4o-mini
  base_url: http://%s/v1
  api_key_env: EVALSI_RESUME_TEST_KEY
`, name, trials, addr) + rest
	p := filepath.Join(dir, "resume.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type trialScores struct {
	status string
	scores map[string]float64
	events int
}

// storedTrials reads every trial of the run, keyed "record/trial".
func storedTrials(t *testing.T, db, runID string) map[string]trialScores {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	trials, err := st.ListTrials(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	scores, err := st.Scores(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]trialScores{}
	for _, tr := range trials {
		k := fmt.Sprintf("%s/%d", tr.RecordID, tr.Trial)
		if _, dup := out[k]; dup {
			t.Fatalf("trial %s is stored twice", k)
		}
		n, err := st.CountEvents(ctx, tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		ts := trialScores{status: tr.Status, scores: map[string]float64{}, events: n}
		for _, s := range scores[tr.ID] {
			ts.scores[s.Name] = s.Value
		}
		out[k] = ts
	}
	return out
}

// watcher reads a store another process is writing, to time the kills.
type watcher struct {
	db string
	st *store.Store
}

// finished returns the id of the store's only run ("" before it exists)
// and how many of its trials have finished.
func (w *watcher) finished(ctx context.Context) (string, int) {
	if w.st == nil {
		if _, err := os.Stat(w.db); err != nil {
			return "", 0
		}
		st, err := store.Open(ctx, w.db)
		if err != nil {
			return "", 0
		}
		w.st = st
	}
	runs, err := w.st.ListRuns(ctx, store.ListRunsOptions{})
	if err != nil || len(runs) == 0 {
		return "", 0
	}
	trials, err := w.st.ListTrials(ctx, runs[0].ID)
	if err != nil {
		return runs[0].ID, 0
	}
	n := 0
	for _, tr := range trials {
		if !tr.Unfinished() {
			n++
		}
	}
	return runs[0].ID, n
}

func (w *watcher) close() {
	if w.st != nil {
		w.st.Close()
	}
}

// TestResumeAfterSIGKILL kills evalsi with SIGKILL several times in the
// middle of a run, resumes it each time, and checks that the run ends with
// every (record, trial) exactly once, with the scores, trajectories and
// summary of an uninterrupted run of the same spec: a plain model eval, and
// an agent run in bwrap sandboxes, after which nothing the killed engines
// left (sandbox roots, setup snapshots, overlays still mounted) remains.
func TestResumeAfterSIGKILL(t *testing.T) {
	bin := buildEvalsi(t)
	t.Run("model-eval", func(t *testing.T) {
		const records = 40
		addr := slowModel(t, resumeScript(records))
		_, _ = killAndResume(t, bin, resumeSpec(t, addr, records), records*3)
	})
	t.Run("agent-bwrap", func(t *testing.T) {
		requireBwrap(t)
		const records = 30
		addr := slowModel(t, agentResumeScript(records))
		db, refDB := killAndResume(t, bin, agentResumeSpec(t, addr, records, "bwrap"), records*2)
		requireNoLeftovers(t, db)
		requireNoLeftovers(t, refDB)
	})
	t.Run("agent-docker", func(t *testing.T) {
		rung := docker.New()
		if p := rung.Probe(context.Background()); !p.Works {
			testenv.Missing(t, "docker", p.Reason)
		}
		const records = 12
		addr := slowModel(t, agentResumeScript(records))
		db, refDB := killAndResume(t, bin, agentResumeSpec(t, addr, records, "docker"), records*2)
		requireNoLeftovers(t, db)
		// Containers and snapshot images are labelled with their engine's
		// state directory; neither the killed engines' nor those of the
		// uninterrupted run may be left.
		cli, err := rung.Client()
		if err != nil {
			t.Fatal(err)
		}
		owned := filters.NewArgs(filters.Arg("label", "si.evals.owner"))
		cs, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: owned})
		if err != nil {
			t.Fatal(err)
		}
		imgs, err := cli.ImageList(context.Background(), image.ListOptions{All: true, Filters: owned})
		if err != nil {
			t.Fatal(err)
		}
		for _, store := range []string{db, refDB} {
			state := filepath.Join(filepath.Dir(store), "state")
			for _, c := range cs {
				if strings.Contains(c.Labels["si.evals.owner"], state) {
					t.Errorf("container %.12s of %s left: %s", c.ID, filepath.Base(store), c.State)
				}
			}
			for _, im := range imgs {
				if strings.Contains(im.Labels["si.evals.owner"], state) {
					t.Errorf("snapshot image %.19s of %s left", im.ID, filepath.Base(store))
				}
			}
		}
	})
}

// requireNoLeftovers fails when anything is mounted below the store's
// state directory or any sandbox state is left there.
func requireNoLeftovers(t *testing.T, db string) {
	t.Helper()
	state := filepath.Join(filepath.Dir(db), "state")
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(state))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("still mounted after the last resume: %s", m.Mountpoint)
	}
	left, err := os.ReadDir(filepath.Join(state, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		if e.Name() != ".lock" {
			t.Errorf("sandbox state left after the last resume: %s", e.Name())
		}
	}
}

// agentResumeScript: the agent on record i runs one command that records i
// and answers; the checker passes even records only, so scores differ.
func agentResumeScript(n int) *spec.Script {
	s := &spec.Script{}
	for i := range n {
		s.Rules = append(s.Rules, spec.ScriptRule{Contains: fmt.Sprintf("[a%02d]", i), Replies: []spec.ScriptReply{
			{ToolCalls: []spec.ScriptToolCall{{Name: "bash", Arguments: spec.JSON(fmt.Sprintf(`{"command": "cat setup.txt && echo %d > n.txt"}`, i))}},
				InputTokens: 20 + i, OutputTokens: 5},
			{Content: "done", InputTokens: 40 + i, OutputTokens: 1 + i%3},
		}})
	}
	return s
}

// agentResumeSpec writes an agent run of n records × 2 trials on rung,
// with a setup step (so each engine process builds a setup snapshot).
func agentResumeSpec(t *testing.T, addr string, n int, rung string) string {
	t.Helper()
	recs := make([]string, n)
	for i := range n {
		recs[i] = fmt.Sprintf(`{"id": "a%02d", "input": "[a%02d] Record the number."}`, i, i)
	}
	return writeResumeSpec(t, addr, "resume-agent-test", 2, recs, `harness:
  builtin:
    max_steps: 4
environment:
  setup: ["echo ready > setup.txt"]
  sandbox:
    workdir: /workspace
    network: deny
    ladder: [`+rung+`]
  checker:
    command: [sh, -c, 'test $(( $(cat n.txt) % 2 )) -eq 0']
    parser: exit-code
evaluators: [task-success, agent-efficiency]
`)
}

// killAndResume runs specPath uninterrupted for reference, then runs it
// again killing evalsi with SIGKILL three times at random points (resuming
// after each kill, alternating the two resume commands), resumes it to the
// end and compares. It returns the killed run's store and the reference's.
func killAndResume(t *testing.T, bin, specPath string, total int) (killed, ref string) {
	t.Helper()
	env := append(os.Environ(), "EVALSI_RESUME_TEST_KEY=test-key-not-secret")
	// Run from another directory: the dataset path is relative to the spec.
	workdir := t.TempDir()
	evalsiCmd := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.Dir = workdir
		return cmd
	}
	runJSON := func(cmd *exec.Cmd) (map[string]any, string) {
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\nstdout: %s\nstderr: %s", cmd.Args, err, out.String(), errb.String())
		}
		var sum map[string]any
		if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
			t.Fatalf("%v: stdout is not JSON: %v\n%s", cmd.Args, err, out.String())
		}
		return sum, errb.String()
	}

	// The reference: the same spec, uninterrupted.
	refDB := filepath.Join(t.TempDir(), "ref.db")
	refSum, _ := runJSON(evalsiCmd("run", "--store", refDB, "--json", "-f", specPath))
	refID := refSum["run_id"].(string)
	want := storedTrials(t, refDB, refID)
	if len(want) != total {
		t.Fatalf("reference run has %d trials, want %d", len(want), total)
	}

	// The killed run: start it, SIGKILL it once a random number of trials
	// has finished, resume, and again, alternating the two resume commands.
	db := filepath.Join(t.TempDir(), "killed.db")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	ctx := context.Background()
	w := &watcher{db: db}
	defer w.close()
	var runID string
	cutShort := 0 // trials killed while running
	for round := range 3 {
		var cmd *exec.Cmd
		switch {
		case runID == "":
			cmd = evalsiCmd("run", "--store", db, "--json", "-f", specPath)
		case round%2 == 1:
			cmd = evalsiCmd("run", "--store", db, "--json", "--resume", runID)
		default:
			cmd = evalsiCmd("runs", "resume", "--store", db, "--json", runID)
		}
		cmd.Stdout, cmd.Stderr = new(bytes.Buffer), new(bytes.Buffer)
		_, before := w.finished(ctx)
		// Kill somewhere in the next fifth of the run or so, but never so
		// near its end that the last trials (up to concurrency 4 at once)
		// could finish and the run complete before the kill lands.
		target := min(before+5+rng.IntN(total/5), total-5)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
	poll:
		for {
			select {
			case err := <-exited:
				t.Fatalf("round %d: %v ended before it was killed (%v)\nstderr: %s", round, cmd.Args, err, cmd.Stderr)
			case <-time.After(2 * time.Millisecond):
			}
			id, n := w.finished(ctx)
			if n >= target {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				err := <-exited
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("round %d: evalsi did not die of SIGKILL: %v", round, err)
				}
				runID = id
				break poll
			}
		}
		_, after := w.finished(ctx)
		if after < before {
			t.Fatalf("round %d: finished trials went from %d to %d", round, before, after)
		}
		ts, err := w.st.ListTrials(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range ts {
			if tr.Status == store.TrialRunning {
				cutShort++
			}
		}
		t.Logf("round %d: killed with %d of %d trials finished, %d started", round, after, total, len(ts))
		r, err := w.st.GetRun(ctx, runID)
		if err != nil || r.Status != store.RunRunning {
			t.Fatalf("killed run = %+v, %v; want it left running", r, err)
		}
	}
	if cutShort == 0 {
		t.Fatal("no kill landed while a trial was running; the test proves nothing about partial trials")
	}
	sum, _ := runJSON(evalsiCmd("run", "--store", db, "--json", "--resume", runID[:12]))
	if sum["run_id"] != runID || sum["status"] != "completed" {
		t.Fatalf("resumed summary: run %v status %v, want %s completed", sum["run_id"], sum["status"], runID)
	}

	got := storedTrials(t, db, runID)
	if len(got) != total {
		t.Fatalf("resumed run has %d trials, want %d", len(got), total)
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w, g := want[k], got[k]
		if g.status != store.TrialFinished {
			t.Errorf("trial %s: status %s, want %s", k, g.status, store.TrialFinished)
		}
		if !mapsEqual(w.scores, g.scores) {
			t.Errorf("trial %s: scores %v, uninterrupted run %v", k, g.scores, w.scores)
		}
		if w.events != g.events {
			t.Errorf("trial %s: %d events, uninterrupted run %d (a partial attempt left events behind?)", k, g.events, w.events)
		}
	}
	// The summary aggregates old and new trials, each once, exactly as the
	// uninterrupted run did.
	for _, field := range []string{"records", "trials", "errored", "scores", "aggregate", "cost_usd", "tokens"} {
		w, _ := json.Marshal(refSum[field])
		g, _ := json.Marshal(sum[field])
		if !bytes.Equal(w, g) {
			t.Errorf("summary %s = %s, uninterrupted run %s", field, g, w)
		}
	}

	// A completed run cannot be resumed.
	cmd := evalsiCmd("runs", "resume", "--store", db, runID)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "already completed") {
		t.Errorf("resuming a completed run: %v\n%s", err, out)
	}
	return db, refDB
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
