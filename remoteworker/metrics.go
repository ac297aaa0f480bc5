package remoteworker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"evals.si/engine"
	"evals.si/trajectory"
)

// Metrics is what `evalsid worker --metrics-listen` serves: /healthz (the
// process is up), /readyz (its last lease request reached the server) and
// /metrics (trials leased, finished by outcome, running now, leases lost,
// attempts stopped because their run was cancelled), on a registry of its
// own. It counts by watching the worker's queue.
type Metrics struct {
	reg       *prometheus.Registry
	leased    prometheus.Counter
	finished  *prometheus.CounterVec
	lost      prometheus.Counter
	cancelled prometheus.Counter

	mu sync.Mutex
	// reached is whether the last lease request got an answer; why says
	// what went wrong when not.
	reached bool
	why     string
	// live holds the leases this worker holds, by trial and epoch, with
	// when each runs out unless a heartbeat extends it. An attempt leaves
	// it once, whichever way it ends; one whose lease ran out with no
	// heartbeat through is dropped by the engine without a word to the
	// queue, so it leaves at the next scrape, counted as lost.
	live map[leaseKey]time.Time
}

type leaseKey struct {
	trial string
	epoch int64
}

// NewMetrics returns a worker's metrics, not ready until a lease request
// reaches the server.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		leased: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "evalsid_worker_trials_leased_total", Help: "Trial attempts this worker leased.",
		}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsid_worker_trials_finished_total",
			Help: "Trial attempts this worker recorded as ended, by outcome (completed, errored, retried).",
		}, []string{"outcome"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "evalsid_worker_lease_losses_total", Help: "Attempts dropped because the server took their lease back.",
		}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "evalsid_worker_trials_cancelled_total", Help: "Attempts stopped because their run was cancelled on the server.",
		}),
		why:  "no lease request has reached the server yet",
		live: map[leaseKey]time.Time{},
	}
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "evalsid_worker_trials_running", Help: "Trial attempts this worker holds an unexpired lease on now.",
	}, m.runningNow)
	for _, o := range []string{"completed", "errored", "retried"} {
		m.finished.WithLabelValues(o)
	}
	m.reg.MustRegister(m.leased, m.finished, running, m.lost, m.cancelled,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves /healthz, /readyz and /metrics. None takes a token: they
// say nothing about runs.
func (m *Metrics) Handler(log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		reached, why := m.reached, m.why
		m.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !reached {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: " + why + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), Registry: m.reg,
	}))
	return mux
}

// queue wraps the worker's queue to count what goes through it.
func (m *Metrics) queue(q engine.Queue) engine.Queue { return &meteredQueue{Queue: q, m: m} }

func (m *Metrics) contacted(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reached = err == nil
	if err != nil {
		// The kind of failure, not the server's words: /readyz has no token.
		m.why = "the last lease request did not reach the server (the worker's log has the error)"
	}
}

// held records that the lease holds for ttl from now.
func (m *Metrics) held(l *engine.Lease, ttl time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live[leaseKey{l.TrialID, l.Epoch}] = time.Now().Add(ttl)
}

// ended takes an attempt out of the leases held, once, and reports
// whether it was there.
func (m *Metrics) ended(l *engine.Lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := leaseKey{l.TrialID, l.Epoch}
	_, ok := m.live[k]
	delete(m.live, k)
	return ok
}

// runningNow counts the leases held, dropping those that ran out.
func (m *Metrics) runningNow() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for k, until := range m.live {
		if now.After(until) {
			delete(m.live, k)
			m.lost.Inc()
		}
	}
	return float64(len(m.live))
}

type meteredQueue struct {
	engine.Queue
	m *Metrics
}

func (q *meteredQueue) Lease(ctx context.Context, req engine.LeaseRequest) (*engine.Lease, error) {
	l, err := q.Queue.Lease(ctx, req)
	if ctx.Err() == nil {
		q.m.contacted(err)
	}
	if err == nil && l != nil {
		q.m.leased.Inc()
		q.m.held(l, ttlOf(l, req.TTL))
	}
	return l, err
}

func ttlOf(l *engine.Lease, asked time.Duration) time.Duration {
	switch {
	case l.TTL > 0:
		return l.TTL
	case asked > 0:
		return asked
	}
	return 30 * time.Second // engine.Worker's default
}

// A heartbeat or event write refused as lost ends the attempt: the worker
// drops it without finishing.
func (q *meteredQueue) Heartbeat(ctx context.Context, l *engine.Lease) error {
	err := q.Queue.Heartbeat(ctx, l)
	if err == nil {
		q.m.held(l, ttlOf(l, 0))
	}
	q.lostIf(l, err)
	return err
}

func (q *meteredQueue) AppendEvents(ctx context.Context, l *engine.Lease, evs []trajectory.Event) error {
	err := q.Queue.AppendEvents(ctx, l, evs)
	q.lostIf(l, err)
	return err
}

// Finish ends the attempt whatever its answer: recorded, lost, or failed
// (the lease then runs out on the server and the trial is run again).
func (q *meteredQueue) Finish(ctx context.Context, l *engine.Lease, o *engine.Outcome, retry bool) error {
	err := q.Queue.Finish(ctx, l, o, retry)
	switch {
	case err == nil && retry:
		q.m.finished.WithLabelValues("retried").Inc()
	case err == nil && o.Status == engine.TrialErrored:
		q.m.finished.WithLabelValues("errored").Inc()
	case err == nil:
		q.m.finished.WithLabelValues("completed").Inc()
	}
	if !q.lostIf(l, err) {
		q.m.ended(l)
	}
	return err
}

// lostIf ends the attempt as lost when err says its lease was taken back,
// or as cancelled when that was because its run was cancelled.
func (q *meteredQueue) lostIf(l *engine.Lease, err error) bool {
	if !errors.Is(err, engine.ErrLeaseLost) {
		return false
	}
	if q.m.ended(l) {
		if errors.Is(err, ErrCancelled) {
			q.m.cancelled.Inc()
		} else {
			q.m.lost.Inc()
		}
	}
	return true
}
