package server_test

import (
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"evals.si/api"
)

// TestProbesNeedNoToken proves /healthz, /readyz and /metrics answer a
// caller with no token (a kubelet, a Prometheus scraper), each with its
// documented status and content type, and that /readyz turns 503 — while
// /healthz stays 200 — once the store no longer answers.
func TestProbesNeedNoToken(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		path, contentType string
	}{
		{"/healthz", "application/json"},
		{"/readyz", "application/json"},
		{"/metrics", "text/plain"},
	} {
		r := f.do("GET", tc.path, "", nil)
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), tc.contentType) {
			t.Errorf("GET %s without a token: %d %s, want 200 %s", tc.path, r.status, r.header.Get("Content-Type"), tc.contentType)
		}
	}
	ready := decodeAs[map[string]any](t, f.do("GET", "/readyz", "", nil), http.StatusOK)
	if ready["status"] != "ready" || ready["schema_version"].(float64) < 1 {
		t.Errorf("/readyz answered %v", ready)
	}

	if err := f.st.Close(); err != nil {
		t.Fatal(err)
	}
	apiError(t, f.do("GET", "/readyz", "", nil), http.StatusServiceUnavailable, "unavailable", "store")
	if r := f.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Errorf("/healthz with the store closed: %s, want 200 (the process is up)", r)
	}
	// The queue depth cannot be counted; the rest is still served.
	r := f.do("GET", "/metrics", "", nil)
	fams := parseMetrics(t, r)
	if _, ok := fams["evalsid_queue_pending_trials"]; ok {
		t.Error("the pending-trials gauge was reported with the store closed")
	}
	if _, ok := fams["evalsid_runs_submitted_total"]; !ok {
		t.Errorf("/metrics with the store closed lost the other metrics: %s", r.body)
	}
}

// TestMetricsCount proves /metrics counts what the server does, parsed as
// Prometheus parses it: a submitted run, requests by route pattern (not by
// path) and status, the queue depth at scrape time, leases granted, lost
// and expired, and trials by outcome.
func TestMetricsCount(t *testing.T) {
	f := newFixture(t, nil)
	scrape := func() map[string]*dto.MetricFamily { return parseMetrics(t, f.do("GET", "/metrics", "", nil)) }

	before := scrape()
	want(t, before, "evalsid_runs_submitted_total", nil, 0)
	want(t, before, "evalsid_queue_pending_trials", nil, 0)

	run := f.submit(alphaEditor, modelSpec("metrics", "ALPHA_KEY", "r1", "r2"))
	f.do("GET", "/v1/runs/"+run.ID, alphaEditor, nil)
	apiError(t, f.do("GET", "/v1/runs/nosuchrun", alphaEditor, nil), http.StatusNotFound, "not_found")
	m := scrape()
	want(t, m, "evalsid_runs_submitted_total", nil, 1)
	want(t, m, "evalsid_queue_pending_trials", nil, 2)
	want(t, m, "evalsid_http_requests_total", map[string]string{"route": "POST /v1/runs", "code": "201"}, 1)
	want(t, m, "evalsid_http_requests_total", map[string]string{"route": "GET /v1/runs/{id}", "code": "200"}, 1)
	want(t, m, "evalsid_http_requests_total", map[string]string{"route": "GET /v1/runs/{id}", "code": "404"}, 1)
	if h := find(m, "evalsid_http_request_duration_seconds", map[string]string{"route": "POST /v1/runs"}); h == nil || h.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("no request duration observed for POST /v1/runs: %v", h)
	}

	// One trial finished; the other leased, then expired by the sweeper;
	// the stale lease's heartbeat is refused as lost.
	l1 := f.lease(workerTok, "w1", run.ID)
	if r := f.do("POST", "/v1/worker/trials/"+l1.TrialID+"/finish", workerTok, finishBody(l1, "yes")); r.status != http.StatusNoContent {
		t.Fatalf("finish: %s", r)
	}
	l2 := f.lease(workerTok, "w1", run.ID)
	f.expireLeases()
	apiError(t, f.do("POST", "/v1/worker/trials/"+l2.TrialID+"/heartbeat", workerTok, api.HeartbeatRequest{Fence: api.Fence{Epoch: l2.Epoch}}), http.StatusConflict, "lease_lost")

	m = scrape()
	want(t, m, "evalsid_leases_total", map[string]string{"event": "granted"}, 2)
	want(t, m, "evalsid_leases_total", map[string]string{"event": "expired"}, 1)
	want(t, m, "evalsid_leases_total", map[string]string{"event": "lost"}, 1)
	want(t, m, "evalsid_trials_finished_total", map[string]string{"outcome": "completed"}, 1) // scores, no pass/fail verdict
	want(t, m, "evalsid_trials_finished_total", map[string]string{"outcome": "errored"}, 0)
	want(t, m, "evalsid_queue_pending_trials", nil, 1) // the expired trial's next attempt
}

// parseMetrics parses a /metrics response in the text exposition format,
// failing on anything Prometheus would refuse.
func parseMetrics(t *testing.T, r response) map[string]*dto.MetricFamily {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics: %s", r)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(r.body)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, r.body)
	}
	return fams
}

// find returns the metric of the family with exactly these labels.
func find(fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := len(got) == len(labels)
		for k, v := range labels {
			match = match && got[k] == v
		}
		if match {
			return m
		}
	}
	return nil
}

// want checks a counter's or gauge's value.
func want(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string, v float64) {
	t.Helper()
	m := find(fams, name, labels)
	got := 0.0
	switch {
	case m == nil && v == 0 && name != "evalsid_queue_pending_trials" && name != "evalsid_runs_submitted_total":
		return // a labelled counter not yet incremented may be absent
	case m == nil:
		t.Errorf("%s%v is missing", name, labels)
		return
	case m.GetCounter() != nil:
		got = m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		got = m.GetGauge().GetValue()
	}
	if got != v {
		t.Errorf("%s%v = %v, want %v", name, labels, got, v)
	}
}
