// Package traces serves dataset: {traces: …}: records built from production
// traces, read from Jaeger's query API (/api/v3/traces) or from OTLP JSON
// files (the OpenTelemetry Collector file exporter's format).
//
// A trace gives one record, built from its root span of the service: the
// earliest span of the service (resource attribute service.name) that has
// no parent, or whose parent is absent from the trace or belongs to another
// service. The record's id is the trace id; its input is the span's
// gen_ai.input.messages (the GenAI semantic conventions) or else its
// input.value (OpenInference); its expected answer is gen_ai.output.messages
// (the answer production gave) or output.value. A trace whose root span
// carries no input is skipped and counted.
//
// Traces are kept in this order of tests: the root span started within
// lookback (default 24h) of now; policy.errors_only; policy.sample, which
// keeps a trace when the first 8 bytes of SHA-256 of its lowercase hex
// trace id, read as a big-endian fraction of 2^64, fall below the rate (so
// the same traces are kept on every read, and by any tool that hashes the
// same way); then filter, a CEL expression over span. Records come newest
// first (by the root span's start, then trace id), and policy.limit keeps
// the newest ones.
package traces

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"time"

	"evals.si/spec"
)

// Span statuses as a filter sees them.
const (
	StatusOK    = "ok"
	StatusError = "error"
	StatusUnset = "unset"
)

// DefaultLookback is how far back traces are read when lookback is unset.
const DefaultLookback = 24 * time.Hour

// Span is one span, as a filter sees it: `span.name`, `span.attributes["http.route"]`,
// `span.status == "error"`, `span.duration_ms > 500`, `span.resource["deployment.environment"]`.
type Span struct {
	Name string `cel:"name"`
	// Attributes are the span's attributes: strings, bools, ints, doubles,
	// bytes, lists and maps as OTLP typed them.
	Attributes map[string]any `cel:"attributes"`
	// Status is "ok", "error" or "unset".
	Status     string  `cel:"status"`
	DurationMS float64 `cel:"duration_ms"`
	TraceID    string  `cel:"trace_id"`
	SpanID     string  `cel:"span_id"`
	// ParentSpanID is empty for a span without a parent.
	ParentSpanID string `cel:"parent_span_id"`
	// Kind is "server", "client", "internal", "producer", "consumer" or
	// "unspecified".
	Kind  string    `cel:"kind"`
	Start time.Time `cel:"start"`
	// Resource holds the resource attributes (service.name, …).
	Resource map[string]any `cel:"resource"`

	service string
}

// Options configure a Source.
type Options struct {
	// HTTP is the client for the Jaeger query API (default: a client with
	// a 60s timeout).
	HTTP *http.Client
	// Now is the end of the lookback window (default time.Now); tests set it.
	Now func() time.Time
	// MaxTraces bounds how many traces one query asks Jaeger for
	// (query.num_traces, default 10000). A window holding more is read
	// only in part, and a warning says so.
	MaxTraces int
	// AllowURL, when set, must accept traces.url and every address a
	// redirect leads to: a server reads only the trace backends its
	// operator configured, not any address a submitted spec names (nil
	// allows any: embedded mode, the user's own).
	AllowURL func(*url.URL) error
	// FileRoot, when set, is the only directory traces.file may name,
	// relative to it (a server's); empty reads any path, relative to the
	// spec's directory.
	FileRoot string
	// CostLimit bounds a filter's evaluation cost per span (default 1e6);
	// a span that exceeds it is skipped and counted as a filter error.
	CostLimit uint64
	Logger    *slog.Logger
}

// Source builds records from traces. It is safe for concurrent use.
type Source struct {
	o Options
}

// NewSource returns a source; register it with dataset.Registry.ServeTraces.
func NewSource(o Options) *Source {
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 60 * time.Second}
	}
	if o.AllowURL != nil {
		c := *o.HTTP
		allow, prev := o.AllowURL, c.CheckRedirect
		c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
			if err := allow(req.URL); err != nil {
				return fmt.Errorf("redirected to %s: %w", req.URL.Redacted(), err)
			}
			if prev != nil {
				return prev(req, via)
			}
			if len(via) >= 10 {
				return fmt.Errorf("stopped after 10 redirects")
			}
			return nil
		}
		o.HTTP = &c
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxTraces <= 0 {
		o.MaxTraces = 10000
	}
	if o.CostLimit == 0 {
		o.CostLimit = 1_000_000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Source{o: o}
}

// Stats count what a read kept and skipped.
type Stats struct {
	// Traces is how many traces had a span of the service.
	Traces int
	// OutOfWindow, NotErrors, Unsampled and Filtered are the traces that
	// lookback, policy.errors_only, policy.sample and the filter dropped.
	OutOfWindow, NotErrors, Unsampled, Filtered int
	// FilterErrors is how many traces the filter could not be evaluated on
	// (skipped).
	FilterErrors int
	// NoInput is how many root spans carried neither gen_ai.input.messages
	// nor input.value (skipped).
	NoInput int
	// OverLimit is how many records policy.limit left out.
	OverLimit int
	// Records is how many records were returned.
	Records int
}

// TraceRecords implements dataset.TraceRecords.
func (s *Source) TraceRecords(ctx context.Context, d spec.TracesDataset, baseDir string) ([]spec.Record, error) {
	recs, st, err := s.Read(ctx, d, baseDir)
	if err != nil {
		return nil, err
	}
	s.o.Logger.Info("traces dataset read", "service", d.Service, "traces", st.Traces, "records", st.Records,
		"out_of_window", st.OutOfWindow, "not_errors", st.NotErrors, "unsampled", st.Unsampled, "filtered", st.Filtered,
		"filter_errors", st.FilterErrors, "no_input", st.NoInput, "over_limit", st.OverLimit)
	return recs, nil
}

// Read returns the records of d and what was kept and skipped.
func (s *Source) Read(ctx context.Context, d spec.TracesDataset, baseDir string) ([]spec.Record, Stats, error) {
	var st Stats
	// The filter is compiled before anything is read: a typo fails at once.
	flt, err := compileFilter(d.Filter, s.o.CostLimit)
	if err != nil {
		return nil, st, err
	}
	now := s.o.Now()
	lookback := d.Lookback.D()
	if lookback <= 0 {
		lookback = DefaultLookback
	}
	since := now.Add(-lookback)
	var spans []*Span
	switch {
	case d.URL != "" && d.File != "":
		return nil, st, fmt.Errorf("traces: give url or file, not both")
	case d.URL != "":
		spans, err = s.query(ctx, d.URL, d.Service, since, now)
	case d.File != "":
		spans, err = s.readFiles(ctx, d.File, baseDir)
	default:
		return nil, st, fmt.Errorf("traces: give url (a Jaeger query endpoint) or file (OTLP JSON)")
	}
	if err != nil {
		return nil, st, err
	}
	pol := spec.TracePolicy{}
	if d.Policy != nil {
		pol = *d.Policy
	}
	var kept []spec.Record
	var starts = map[string]time.Time{}
	for _, root := range roots(spans, d.Service) {
		st.Traces++
		switch {
		case root.Start.Before(since) || root.Start.After(now):
			st.OutOfWindow++
			continue
		case pol.ErrorsOnly && root.Status != StatusError:
			st.NotErrors++
			continue
		case pol.Sample != nil && !Sampled(root.TraceID, *pol.Sample):
			st.Unsampled++
			continue
		}
		if flt != nil {
			ok, err := flt.match(ctx, root)
			if err != nil {
				if ctx.Err() != nil {
					return nil, st, ctx.Err()
				}
				st.FilterErrors++
				s.o.Logger.Debug("traces filter failed on a span; skipped", "trace_id", root.TraceID, "err", err)
				continue
			}
			if !ok {
				st.Filtered++
				continue
			}
		}
		rec, ok := record(root, d.Service)
		if !ok {
			st.NoInput++
			continue
		}
		starts[rec.ID] = root.Start
		kept = append(kept, rec)
	}
	// Newest first: a regression set from production should reflect what
	// production does now; ties (same start) by trace id, so reads repeat.
	slices.SortFunc(kept, func(a, b spec.Record) int {
		if c := starts[b.ID].Compare(starts[a.ID]); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if pol.Limit > 0 && len(kept) > pol.Limit {
		st.OverLimit = len(kept) - pol.Limit
		kept = kept[:pol.Limit]
	}
	st.Records = len(kept)
	return kept, st, nil
}

func (s *Source) readFiles(ctx context.Context, file, baseDir string) ([]*Span, error) {
	tf, name, err := s.files(file, baseDir)
	if err != nil {
		return nil, err
	}
	defer tf.close()
	return tf.read(ctx, name)
}

// Sampled reports whether policy.sample keeps the trace: the first 8 bytes
// of SHA-256 of the lowercase hex trace id, as a fraction of 2^64, fall
// below rate. Rate 1 keeps every trace, 0 none.
func Sampled(traceID string, rate float64) bool {
	if rate >= 1 {
		return true
	}
	if rate <= 0 {
		return false
	}
	sum := sha256.Sum256([]byte(traceID))
	return float64(binary.BigEndian.Uint64(sum[:8])) < rate*math.Exp2(64)
}

// roots returns each trace's root span of service: among the service's
// spans whose parent is not a span of the service in the trace (no parent,
// a parent not in the data, or one of another service), the earliest.
func roots(spans []*Span, service string) []*Span {
	byID := map[string]*Span{}
	for _, s := range spans {
		if s.SpanID != "" {
			byID[s.TraceID+"/"+s.SpanID] = s
		}
	}
	best := map[string]*Span{}
	var order []string
	for _, s := range spans {
		if s.service != service {
			continue
		}
		if p, ok := byID[s.TraceID+"/"+s.ParentSpanID]; ok && s.ParentSpanID != "" && p.service == service {
			continue
		}
		cur, seen := best[s.TraceID]
		if !seen {
			order = append(order, s.TraceID)
		}
		if !seen || s.Start.Before(cur.Start) || (s.Start.Equal(cur.Start) && s.SpanID < cur.SpanID) {
			best[s.TraceID] = s
		}
	}
	out := make([]*Span, 0, len(order))
	for _, id := range order {
		out = append(out, best[id])
	}
	return out
}
