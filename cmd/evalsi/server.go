package main

// --server: the commands that read or write runs (run, runs, view, promote)
// work against `evalsid serve` through its API instead of the local store,
// with the same output and exit codes. The token is read from EVALSI_TOKEN
// or the config file, never from a flag, so it stays out of shell history
// and process listings.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"evals.si/api"
	"evals.si/apiclient"
	"evals.si/report"
	"evals.si/store"
	"evals.si/trajectory"
)

const serverUsage = "a server's `URL` (http://host:port): use its API instead of the local store; the token comes from EVALSI_TOKEN or the config file"

// dialServer returns a client of the server at base, with the token for it.
func dialServer(base string) (*apiclient.Client, error) {
	tok, err := apiclient.Token(os.Getenv, base)
	if err != nil {
		return nil, &usageError{err}
	}
	if tok == "" {
		where := apiclient.ConfigFile(os.Getenv)
		if where == "" {
			where = "$XDG_CONFIG_HOME/evalsi/config.yaml"
		}
		return nil, usagef("--server %s: no API token: set EVALSI_TOKEN, or put it in %s as `token: TOKEN` (or under servers: {%q: {token: TOKEN}}); there is no token flag, so it stays out of shell history", base, where, base)
	}
	c, err := apiclient.New(base, tok)
	if err != nil {
		return nil, &usageError{err}
	}
	return c, nil
}

// serverErr makes a refusal of the server (a 4xx: a bad spec, a run that is
// not there, a missing permission) a usage error, exit 2; the server's own
// failures and an unreachable server stay internal errors.
func serverErr(err error) error {
	var ae *apiclient.Error
	if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 {
		return &usageError{err}
	}
	return err
}

// refuseWithServer names the flags a command cannot honour with --server.
func refuseWithServer(fs *pflag.FlagSet, names ...string) error {
	var set []string
	for _, n := range names {
		if fs.Changed(n) {
			set = append(set, "--"+n)
		}
	}
	if len(set) > 0 {
		return usagef("%v cannot be used with --server (it names this machine's store)", set)
	}
	return nil
}

// apiStore reads runs through the API in the shapes the local store has,
// so `runs show`, `runs compare` and JUnit print exactly what they print
// embedded (report.DetailStore). What the API does not carry (a run's spec
// and spec path, a trial's record and isolation report) stays empty.
type apiStore struct {
	c *apiclient.Client

	mu     sync.Mutex
	trials map[string][]api.Trial    // by run id, read once
	counts map[string]map[string]int // trial counts by run id, as ListRuns saw them
}

func newAPIStore(c *apiclient.Client) *apiStore {
	return &apiStore{c: c, trials: map[string][]api.Trial{}, counts: map[string]map[string]int{}}
}

// CountTrials is the run's trial counts the API sends with it.
func (s *apiStore) CountTrials(ctx context.Context, runID string) (map[string]int, error) {
	s.mu.Lock()
	n, ok := s.counts[runID]
	s.mu.Unlock()
	if ok {
		return n, nil
	}
	r, err := s.c.Run(ctx, runID)
	if err != nil {
		return nil, serverErr(err)
	}
	return r.Counts, nil
}

func (s *apiStore) GetRun(ctx context.Context, id string) (store.Run, error) {
	r, err := s.c.Run(ctx, id)
	if err != nil {
		return store.Run{}, serverErr(err)
	}
	return storeRun(r)
}

func (s *apiStore) apiTrials(ctx context.Context, runID string) ([]api.Trial, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts, ok := s.trials[runID]; ok {
		return ts, nil
	}
	tl, err := s.c.Trials(ctx, runID)
	if err != nil {
		return nil, serverErr(err)
	}
	s.trials[runID] = tl.Trials
	return tl.Trials, nil
}

func (s *apiStore) ListTrials(ctx context.Context, runID string) ([]store.Trial, error) {
	ts, err := s.apiTrials(ctx, runID)
	if err != nil {
		return nil, err
	}
	out := make([]store.Trial, 0, len(ts))
	for _, t := range ts {
		out = append(out, storeTrial(t))
	}
	return out, nil
}

func (s *apiStore) Scores(ctx context.Context, runID string) (map[string][]store.Score, error) {
	ts, err := s.apiTrials(ctx, runID)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]store.Score, len(ts))
	for _, t := range ts {
		out[t.ID] = storeScores(t.Scores)
	}
	return out, nil
}

// storeRun is an API run as the store holds it (its summary as the JSON the
// store keeps).
func storeRun(r api.Run) (store.Run, error) {
	out := store.Run{ID: r.ID, Name: r.Name, Status: r.Status, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt,
		Error: r.Error, Project: r.Project, DatasetVersion: r.DatasetVersion}
	if r.Summary != nil {
		b, err := json.Marshal(r.Summary)
		if err != nil {
			return store.Run{}, fmt.Errorf("encoding the summary of run %s: %w", r.ID, err)
		}
		out.Summary = b
	}
	return out, nil
}

func storeTrial(t api.Trial) store.Trial {
	return store.Trial{ID: t.ID, RunID: t.RunID, RecordID: t.RecordID, Trial: t.Trial, Attempt: t.Attempt, Status: t.Status,
		Passed: t.Passed, ErrorKind: t.ErrorKind, Error: t.Error, Output: t.Output, CostUSD: t.CostUSD,
		Usage:     trajectory.Usage{InputTokens: t.InputTokens, OutputTokens: t.OutputTokens},
		StartedAt: t.StartedAt, FinishedAt: t.FinishedAt}
}

// storeScores are a trial's scores in name order (the API sends a map).
func storeScores(m map[string]float64) []store.Score {
	out := make([]store.Score, 0, len(m))
	for name, v := range m {
		out = append(out, store.Score{Name: name, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// viewerOn reports whether the server serves the viewer: its /login page
// answers only then.
func viewerOn(ctx context.Context, base string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/login", nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("reaching %s: %w", base, err)
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

func (s *apiStore) ListRuns(ctx context.Context, opt store.ListRunsOptions) ([]store.Run, error) {
	l, err := s.c.Runs(ctx, opt.Limit, opt.Before)
	if err != nil {
		return nil, serverErr(err)
	}
	var out []store.Run // nil when there are none, as the store answers
	for _, r := range l.Runs {
		s.mu.Lock()
		s.counts[r.ID] = r.Counts
		s.mu.Unlock()
		sr, err := storeRun(r)
		if err != nil {
			return nil, err
		}
		out = append(out, sr)
	}
	return out, nil
}

// ExportJSONL is the server's own export, which has what the trial list
// lacks (each trial's record and isolation report).
func (s *apiStore) ExportJSONL(ctx context.Context, w io.Writer, runID string) error {
	if err := s.c.Export(ctx, runID, w); err != nil {
		return serverErr(fmt.Errorf("exporting run %s: %w", runID, err))
	}
	return nil
}

// ExportParquet converts the server's JSONL export, so the rows carry each
// trial's record and isolation report as an embedded export's do.
func (s *apiStore) ExportParquet(ctx context.Context, w io.Writer, runID string) error {
	e, err := spoolExport(ctx, s, runID)
	if err != nil {
		return err
	}
	defer e.Close()
	return report.ExportParquet(ctx, w, e, e.run.ID)
}
