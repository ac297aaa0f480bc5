package remoteworker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"evals.si/engine"
	"evals.si/runqueue"
	"evals.si/spec"
	"evals.si/store"
)

// TestMetricsFollowTheQueue proves the worker's /readyz turns ready once a
// lease request reached its queue, and its /metrics (parsed as Prometheus
// parses it) count trials leased, finished by outcome, running now and
// leases lost, over a real store's queue: one attempt finished, one taken
// back by the sweeper while it ran.
func TestMetricsFollowTheQueue(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "evalsi.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	run, err := runqueue.Submit(ctx, st, runqueue.Submission{Spec: &spec.Spec{Name: "m"},
		Records: []spec.Record{{ID: "r1"}, {ID: "r2"}}, Limits: engine.Limits{Trials: 1}})
	if err != nil {
		t.Fatal(err)
	}

	m := NewMetrics()
	q := m.queue(runqueue.New(st))
	hs := httptest.NewServer(m.Handler(slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Cleanup(hs.Close)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	value := func(name, outcome string) float64 {
		t.Helper()
		code, body := get("/metrics")
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(body))
		if code != http.StatusOK || err != nil {
			t.Fatalf("/metrics: %d %v\n%s", code, err, body)
		}
		for _, mt := range fams[name].GetMetric() {
			if outcome != "" && (len(mt.GetLabel()) != 1 || mt.GetLabel()[0].GetValue() != outcome) {
				continue
			}
			return mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
		}
		t.Fatalf("no %s{%s} in\n%s", name, outcome, body)
		return 0
	}

	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before any lease request: %d %s, want 503", code, body)
	}

	req := engine.LeaseRequest{Worker: "w", TTL: time.Minute, Runs: []string{run.ID}}
	l1, err := q.Lease(ctx, req)
	if err != nil || l1 == nil {
		t.Fatalf("lease: %v %v", l1, err)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after a lease: %d %s", code, body)
	}
	if v := value("evalsid_worker_trials_running", ""); v != 1 {
		t.Errorf("running %v with one lease, want 1", v)
	}
	now := time.Now()
	if err := q.Finish(ctx, l1, &engine.Outcome{RunID: run.ID, RecordID: l1.Record.ID, Trial: l1.Trial, Attempt: l1.Attempt,
		Status: engine.TrialCompleted, Started: now, Finished: now}, false); err != nil {
		t.Fatal(err)
	}

	l2, err := q.Lease(ctx, req)
	if err != nil || l2 == nil {
		t.Fatalf("second lease: %v %v", l2, err)
	}
	if _, err := st.Requeue(ctx, store.RequeueRequest{RunID: run.ID, All: true}); err != nil {
		t.Fatal(err)
	}
	if err := q.Heartbeat(ctx, l2); !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("heartbeat of a taken-back lease: %v, want lease lost", err)
	}
	// The engine drops a lost attempt, but a last event write may still come.
	_ = q.AppendEvents(ctx, l2, nil)

	for _, c := range []struct {
		name, outcome string
		want          float64
	}{
		{"evalsid_worker_trials_leased_total", "", 2},
		{"evalsid_worker_trials_finished_total", "completed", 1},
		{"evalsid_worker_trials_finished_total", "errored", 0},
		{"evalsid_worker_trials_running", "", 0},
		{"evalsid_worker_lease_losses_total", "", 1},
	} {
		if got := value(c.name, c.outcome); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.outcome, got, c.want)
		}
	}
}
