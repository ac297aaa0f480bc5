package server_test

import (
	"net/http"
	"testing"

	"evals.si/api"
)

// What no submitted spec may do, whatever the rules: read a server file
// outside datasets_dir (an opaque benchmark URI included), read another
// project's promoted datasets, name a worker's files or images, or run on
// the host rung. Each is refused and writes nothing.
func TestSubmitConfined(t *testing.T) {
	f := newFixture(t, nil)
	withDataset := func(d map[string]any) map[string]any {
		s := modelSpec("x", "ALPHA_KEY", "r1")
		s["dataset"] = d
		return s
	}
	withEnv := func(env map[string]any) map[string]any {
		s := agentSpec("deny", nil)
		s["environment"] = env
		return s
	}
	tests := []struct {
		name    string
		spec    map[string]any
		status  int
		mention string
	}{
		{"opaque URI out of datasets_dir", withDataset(map[string]any{"uri": "swebench:../outside/secret.jsonl"}), 400, "dataset.uri"},
		{"opaque URI to /etc", withDataset(map[string]any{"uri": "swebench:/etc/passwd"}), 400, "dataset.uri"},
		{"URI with an absolute path", withDataset(map[string]any{"uri": "swebench:///etc/passwd"}), 400, "dataset.uri"},
		{"another project's promoted dataset", withDataset(map[string]any{"path": "promoted/beta/" + betaSecret + ".jsonl"}), 400, "dataset.path"},
		{"another project's promoted dataset by URI", withDataset(map[string]any{"uri": "swebench://promoted/beta/" + betaSecret + ".jsonl"}), 400, "dataset.uri"},
		{"a worker file as script", func() map[string]any {
			s := modelSpec("x", "", "r1")
			s["target"] = map[string]any{"connector": "scripted", "model": "m", "script_file": "/root/.aws/credentials"}
			return s
		}(), 422, "file on the worker"},
		{"a worker directory as image", withEnv(map[string]any{"image": "dir:/"}), 422, "local image"},
		{"a mirror to a worker directory", withEnv(map[string]any{"image": "registry.corp/base:1", "image_mirrors": map[string]string{"registry.corp/base:1": "dir:/usr"}}), 422, "local image"},
		{"the host rung", withEnv(map[string]any{"sandbox": map[string]any{"ladder": []string{"host"}, "allow_unsafe_host": true}}), 422, "host rung"},
		{"a cgroup directory of the worker", withEnv(map[string]any{"sandbox": map[string]any{"cgroup": "/sys/fs/cgroup/x"}}), 422, "cgroup"},
		{"signature keys from worker files", withEnv(map[string]any{"sandbox": map[string]any{"image_signatures": map[string]any{"keys": []string{"/etc/evalsi/cosign.pub"}}}}), 422, "PEM"},
		{"a mirror that joins into a worker directory", withEnv(map[string]any{"image": "reg.example/ir:/root", "image_mirrors": map[string]string{"reg.example/": "d"}}), 422, "local image"},
		{"a script file named like the dataset", func() map[string]any {
			s := modelSpec("x", "", "r1")
			s["dataset"] = map[string]any{"path": "shared.jsonl"}
			s["target"] = map[string]any{"connector": "scripted", "model": "m", "script_file": "shared.jsonl"}
			return s
		}(), 422, "file on the worker"},
		{"trials that overflow", func() map[string]any {
			s := modelSpec("x", "ALPHA_KEY", "r1", "r2", "r3", "r4")
			s["trials"] = 1<<62 + 1
			return s
		}(), 422, "max_trials_per_run"},
		{"too many trials", func() map[string]any {
			s := modelSpec("x", "ALPHA_KEY", "r1")
			s["trials"] = 300000
			return s
		}(), 422, "max_trials_per_run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot()
			r := f.do("POST", "/v1/runs", alphaEditor, map[string]any{"spec": tt.spec})
			code := "refused"
			if tt.status == http.StatusBadRequest {
				code = "bad_request"
			}
			apiError(t, r, tt.status, code, tt.mention)
			if after := f.snapshot(); after != before {
				t.Errorf("a refused submit wrote something:\n%s", after)
			}
		})
	}
	// The project's own promoted dataset is fine.
	f.submit(alphaEditor, withDataset(map[string]any{"path": "promoted/alpha/mine.jsonl"}))
}

// A viewer's submission is refused before its body is read, however large.
func TestViewerSubmitRefusedUnread(t *testing.T) {
	f := newFixture(t, nil)
	r := f.do("POST", "/v1/runs", alphaViewer, map[string]any{"spec": modelSpec("x", "ALPHA_KEY", "r1")})
	apiError(t, r, http.StatusForbidden, "forbidden", "runs.create")
}

// The server keeps the retry budget and refuses numbers no trial makes: a
// worker cannot retry a trial for ever or poison the run's summary.
func TestFinishIsBounded(t *testing.T) {
	f := newFixture(t, nil)
	run := f.submit(alphaEditor, modelSpec("retry", "ALPHA_KEY", "a1"))
	errored := func(l api.Lease) api.FinishRequest {
		b := finishBody(l, "")
		b.Outcome.Status, b.Outcome.ErrorKind, b.Outcome.Error, b.Outcome.Evaluations = "errored", "sandbox", "fell over", nil
		b.Retry = true
		return b
	}
	// retries defaults to 2: two retries, then the attempt is final.
	for i := range 4 {
		l := f.lease(workerTok, "w1", run.ID)
		if i == 0 {
			bad := finishBody(l, "x")
			bad.Outcome.Evaluations[0].Scores[0].Value = 1e308
			apiError(t, f.do("POST", "/v1/worker/trials/"+l.TrialID+"/finish", workerTok, bad), http.StatusBadRequest, "bad_request", "finite")
		}
		if r := f.do("POST", "/v1/worker/trials/"+l.TrialID+"/finish", workerTok, errored(l)); r.status != http.StatusNoContent {
			t.Fatalf("finish %d: %s", i, r)
		}
		if i == 2 {
			break
		}
	}
	if r := f.do("POST", "/v1/worker/lease", workerTok, api.LeaseRequest{Worker: "w1", Runs: []string{run.ID}}); r.status != http.StatusNoContent {
		t.Fatalf("a fourth attempt was leased past the retry budget: %s", r)
	}
	got := decodeAs[api.Run](t, f.do("GET", "/v1/runs/"+run.ID, alphaEditor, nil), http.StatusOK)
	if got.Status != "completed" || got.Summary == nil || got.Summary.Errored != 1 || got.Summary.Attempts != 3 {
		t.Errorf("run after the budget: %+v", got)
	}
}
