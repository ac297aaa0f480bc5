package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"evals.si/store"
	"evals.si/trajectory"
)

// metrics are the server's Prometheus metrics, on a registry of its own
// (two servers in one process, as in tests, count apart). What the store
// does is counted by a Store decorator (meteredStore), so the handlers
// carry no metric lines and nothing a handler forgets goes uncounted.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	durations *prometheus.HistogramVec
	submitted prometheus.Counter
	trials    *prometheus.CounterVec
	leases    *prometheus.CounterVec
}

// Trial outcomes (label "outcome" of evalsid_trials_finished_total).
const (
	outcomePassed  = "passed"
	outcomeFailed  = "failed"
	outcomeNone    = "completed" // ran to its end with no pass/fail verdict (scores only)
	outcomeErrored = "errored"
	outcomeRetried = "retried" // errored, and a new attempt was queued
)

func newMetrics(st Store, log *slog.Logger) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsid_http_requests_total",
			Help: "HTTP requests served, by route pattern and status code.",
		}, []string{"route", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "evalsid_http_request_duration_seconds",
			Help:    "Time to serve an HTTP request, by route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		submitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "evalsid_runs_submitted_total",
			Help: "Runs accepted by POST /v1/runs.",
		}),
		trials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsid_trials_finished_total",
			Help: "Trial attempts recorded as ended, by outcome (passed, failed, completed with scores but no verdict, errored, retried).",
		}, []string{"outcome"}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsid_leases_total",
			Help: "Trial leases granted to workers, lost (a fenced write refused: the lease was taken back), and expired (taken back by the sweeper).",
		}, []string{"event"}),
	}
	for _, o := range []string{outcomePassed, outcomeFailed, outcomeNone, outcomeErrored, outcomeRetried} {
		m.trials.WithLabelValues(o)
	}
	for _, e := range []string{"granted", "lost", "expired"} {
		m.leases.WithLabelValues(e)
	}
	m.reg.MustRegister(m.requests, m.durations, m.submitted, m.trials, m.leases,
		&queueDepth{st: st, log: log, desc: prometheus.NewDesc("evalsid_queue_pending_trials",
			"Trials waiting for a worker (pending attempts of running runs), counted when scraped.", nil, nil)},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// handler serves the registry in Prometheus's text format. A collector
// that fails (the store did not answer) leaves its metric out and the rest
// is served. The path needs no token and a scrape queries the store once
// per running run, so scrapes at once are capped (more get 503): a
// caller cannot multiply the store's load by asking in parallel.
func (m *metrics) handler(log *slog.Logger) http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      m.reg,
	})
	inFlight := make(chan struct{}, maxScrapes)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case inFlight <- struct{}{}:
			defer func() { <-inFlight }()
			h.ServeHTTP(w, r)
		default:
			writeError(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("%d scrapes are being served; try again later", maxScrapes), "")
		}
	})
}

// maxScrapes is how many /metrics requests are served at once.
const maxScrapes = 2

// instrument counts and times the requests h serves under the route
// pattern (the mux's pattern, so label values are bounded by the routes,
// never by the paths clients send).
func (m *metrics) instrument(pattern string, h http.Handler) http.Handler {
	route := prometheus.Labels{"route": pattern}
	return promhttp.InstrumentHandlerDuration(m.durations.MustCurryWith(route),
		promhttp.InstrumentHandlerCounter(m.requests.MustCurryWith(route), h))
}

// queueDepth reports the pending trials of running runs at scrape time.
type queueDepth struct {
	st   Store
	log  *slog.Logger
	desc *prometheus.Desc
}

// queueDepthTimeout bounds a scrape's store queries: a slow store must not
// hold the scraper (its own timeout is usually 10s).
const queueDepthTimeout = 3 * time.Second

func (q *queueDepth) Describe(ch chan<- *prometheus.Desc) { ch <- q.desc }

func (q *queueDepth) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), queueDepthTimeout)
	defer cancel()
	n, err := q.pending(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(q.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(q.desc, prometheus.GaugeValue, float64(n))
}

func (q *queueDepth) pending(ctx context.Context) (int, error) {
	runs, err := q.st.ListRuns(ctx, store.ListRunsOptions{Status: store.RunRunning})
	if err != nil {
		return 0, errors.New("counting pending trials: listing running runs failed")
	}
	n := 0
	for _, r := range runs {
		c, err := q.st.CountTrials(ctx, r.ID)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				continue // deleted since it was listed
			}
			return 0, errors.New("counting pending trials: counting a run's trials failed")
		}
		n += c[store.TrialPending]
	}
	return n, nil
}

// meteredStore counts what the server's store does for the metrics: runs
// created (only submit creates runs here), leases granted, attempts
// completed by outcome, fenced writes refused as lost, and leases the
// sweeper took back. Every other method is the store's own.
type meteredStore struct {
	Store
	m *metrics
}

func (s meteredStore) CreateRun(ctx context.Context, in store.RunInput) (store.Run, error) {
	r, err := s.Store.CreateRun(ctx, in)
	if err == nil {
		s.m.submitted.Inc()
	}
	return r, err
}

func (s meteredStore) Lease(ctx context.Context, req store.LeaseRequest) (store.Lease, error) {
	l, err := s.Store.Lease(ctx, req)
	if err == nil {
		s.m.leases.WithLabelValues("granted").Inc()
	}
	return l, err
}

func (s meteredStore) Heartbeat(ctx context.Context, l store.Lease, ttl time.Duration) (time.Time, error) {
	t, err := s.Store.Heartbeat(ctx, l, ttl)
	s.lost(err)
	return t, err
}

func (s meteredStore) AppendLeased(ctx context.Context, l store.Lease, evs []trajectory.Event) error {
	err := s.Store.AppendLeased(ctx, l, evs)
	s.lost(err)
	return err
}

func (s meteredStore) Complete(ctx context.Context, l store.Lease, c store.Completion) error {
	err := s.Store.Complete(ctx, l, c)
	s.lost(err)
	if err == nil {
		s.m.trials.WithLabelValues(outcomeOf(c)).Inc()
	}
	return err
}

func (s meteredStore) Requeue(ctx context.Context, req store.RequeueRequest) ([]store.Trial, error) {
	taken, err := s.Store.Requeue(ctx, req)
	if err == nil && !req.Expired.IsZero() {
		s.m.leases.WithLabelValues("expired").Add(float64(len(taken)))
	}
	return taken, err
}

func (s meteredStore) lost(err error) {
	if errors.Is(err, store.ErrLeaseLost) {
		s.m.leases.WithLabelValues("lost").Inc()
	}
}

func outcomeOf(c store.Completion) string {
	switch {
	case c.Retry:
		return outcomeRetried
	case c.Result.Status == store.TrialErrored:
		return outcomeErrored
	case c.Result.Passed == nil:
		return outcomeNone
	case *c.Result.Passed:
		return outcomePassed
	default:
		return outcomeFailed
	}
}

// instrumentedMux registers handlers on a ServeMux counted and timed under
// the pattern they are registered with.
type instrumentedMux struct {
	mux *http.ServeMux
	m   *metrics
}

func (im instrumentedMux) Handle(pattern string, h http.Handler) {
	im.mux.Handle(pattern, im.m.instrument(pattern, h))
}

func (im instrumentedMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	im.Handle(pattern, http.HandlerFunc(h))
}
