package server_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"evals.si/api"
	"evals.si/store"
)

// TestCancelRun proves POST /v1/runs/{id}/cancel over HTTP: the same
// token and project rules as the other run endpoints (refusals change
// nothing); a cancel ends the run cancelled with its summary, its pending
// trial never leased and its running one's worker told, at its next
// heartbeat, event batch or finish, that the run was cancelled (409
// lease_lost, reason cancelled), nothing of which is written; a cancelled
// trial counts as neither finished nor errored; cancelling again, or
// cancelling a finished run, returns it unchanged.
func TestCancelRun(t *testing.T) {
	f := newFixture(t, nil)
	beta, _ := f.seedBeta() // finished, of another project
	run := f.submit(alphaEditor, modelSpec("doomed", "ALPHA_KEY", "done", "busy", "waiting"))
	first := f.lease(workerTok, "w1", run.ID)
	if r := f.do("POST", "/v1/worker/trials/"+first.TrialID+"/finish", workerTok, finishBody(first, "yes")); r.status != http.StatusNoContent {
		t.Fatalf("finish: %s", r)
	}
	busy := f.lease(workerTok, "w1", run.ID)
	if r := f.do("POST", "/v1/worker/trials/"+busy.TrialID+"/events", workerTok, eventsBody(busy.Epoch, "working")); r.status != http.StatusNoContent {
		t.Fatalf("events: %s", r)
	}
	cancelPath := "/v1/runs/" + run.ID + "/cancel"

	refusals := []struct {
		name, path, token string
		status            int
		code              string
	}{
		{"no token", cancelPath, "", 401, "unauthenticated"},
		{"a viewer may not cancel", cancelPath, alphaViewer, 403, "forbidden"},
		{"a worker may not cancel", cancelPath, workerTok, 403, "forbidden"},
		{"another project's run is not found", cancelPath, betaEditor, 404, "not_found"},
		{"an unknown run is not found", "/v1/runs/0000ghost/cancel", alphaEditor, 404, "not_found"},
		{"GET is not served", cancelPath, alphaEditor, 405, "method_not_allowed"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot()
			method := "POST"
			if tt.code == "method_not_allowed" {
				method = "GET"
			}
			apiError(t, f.do(method, tt.path, tt.token, nil), tt.status, tt.code)
			if after := f.snapshot(); after != before {
				t.Errorf("a refused cancel changed the store:\n before %s\n after  %s", before, after)
			}
		})
	}
	if got := decodeAs[api.Run](t, f.do("GET", "/v1/runs/"+run.ID, alphaEditor, nil), http.StatusOK); got.Status != api.RunRunning {
		t.Fatalf("after the refusals the run is %s, want running", got.Status)
	}

	got := decodeAs[api.Run](t, f.do("POST", cancelPath, alphaEditor, nil), http.StatusOK)
	wantCounts := map[string]int{store.TrialFinished: 1, store.TrialCancelled: 2}
	if got.ID != run.ID || got.Status != api.RunCancelled || got.FinishedAt.IsZero() || !reflect.DeepEqual(got.Counts, wantCounts) {
		t.Fatalf("cancel = %+v; want run %s cancelled, finished, counts %v", got, run.ID, wantCounts)
	}
	if s := got.Summary; s == nil || s.Status != api.RunCancelled || s.Records != 3 || s.Errored != 0 || s.Scores["exact-match"] != 1 {
		t.Fatalf("summary %+v; want cancelled, 3 records, none errored, exact-match 1 (the one trial that finished)", s)
	}
	if api.RunCancelled != store.RunCancelled {
		t.Fatalf("the API's cancelled status %q is not the store's %q", api.RunCancelled, store.RunCancelled)
	}

	// The worker holding the busy trial is told, and writes nothing.
	before := f.snapshot()
	trialPath := func(op string) string { return "/v1/worker/trials/" + busy.TrialID + "/" + op }
	for _, w := range []struct {
		op   string
		body any
	}{
		{"heartbeat", api.HeartbeatRequest{Fence: api.Fence{Epoch: busy.Epoch}}},
		{"events", eventsBody(busy.Epoch, "late")},
		{"finish", finishBody(busy, "late")},
	} {
		r := f.do("POST", trialPath(w.op), workerTok, w.body)
		apiError(t, r, http.StatusConflict, "lease_lost", "cancelled")
		var e api.Error
		if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Reason != api.ReasonCancelled {
			t.Errorf("%s of the cancelled trial: %s; want reason %q", w.op, r.body, api.ReasonCancelled)
		}
	}
	if after := f.snapshot(); after != before {
		t.Errorf("writes under the cancelled lease changed the store:\n before %s\n after  %s", before, after)
	}
	if r := f.do("POST", "/v1/worker/lease", workerTok, api.LeaseRequest{Worker: "w1", Runs: []string{run.ID}}); r.status != http.StatusNoContent {
		t.Errorf("lease from the cancelled run: %s, want 204 (nothing to lease)", r)
	}

	trials := decodeAs[api.TrialList](t, f.do("GET", "/v1/runs/"+run.ID+"/trials", alphaEditor, nil), http.StatusOK)
	for _, tr := range trials.Trials {
		switch tr.RecordID {
		case "done":
			if tr.Status != store.TrialFinished {
				t.Errorf("trial done: %s, want finished", tr.Status)
			}
		case "waiting":
			if tr.Status != store.TrialCancelled || !tr.StartedAt.IsZero() {
				t.Errorf("trial waiting: %s started %v; want cancelled, never started", tr.Status, tr.StartedAt)
			}
		default:
			if tr.Status != store.TrialCancelled || tr.ErrorKind != "" || tr.Error != "" || tr.Passed != nil {
				t.Errorf("trial %s: %+v; want cancelled, with no error or verdict", tr.RecordID, tr)
			}
		}
	}

	// Again, and a finished run: unchanged.
	for _, c := range []struct {
		name, id, token string
	}{{"the cancelled run", run.ID, alphaEditor}, {"a finished run", beta.ID, betaEditor}} {
		before := decodeAs[api.Run](t, f.do("GET", "/v1/runs/"+c.id, c.token, nil), http.StatusOK)
		snap := f.snapshot()
		again := decodeAs[api.Run](t, f.do("POST", "/v1/runs/"+c.id+"/cancel", c.token, nil), http.StatusOK)
		if !reflect.DeepEqual(again, before) {
			t.Errorf("cancelling %s: %+v\nwant it unchanged: %+v", c.name, again, before)
		}
		if f.snapshot() != snap {
			t.Errorf("cancelling %s changed the store", c.name)
		}
	}
	list := decodeAs[api.RunList](t, f.do("GET", "/v1/runs?status=cancelled", alphaEditor, nil), http.StatusOK)
	if len(list.Runs) != 1 || list.Runs[0].ID != run.ID {
		t.Errorf("runs?status=cancelled = %+v; want the cancelled run alone", list.Runs)
	}
	// A cancelled trial has no result to promote: of every trial, only
	// the one that finished is added.
	res := decodeAs[api.PromoteResult](t, f.do("POST", "/v1/runs/"+run.ID+"/promote", alphaEditor, api.PromoteRequest{Dataset: "from-cancelled", When: "true"}), http.StatusOK)
	if res.Added != 1 {
		t.Errorf("promoting every trial of the cancelled run added %d records, want 1 (the finished one)", res.Added)
	}
}
