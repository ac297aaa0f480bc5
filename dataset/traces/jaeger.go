package traces

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxResponse bounds a Jaeger response read into memory.
const maxResponse = 256 << 20

// query reads the traces of service that started in [since, until] from
// Jaeger's query API: GET /api/v3/traces, whose response is
// {"result": <OTLP JSON TracesData>}, or {"error": {"httpCode", "message"}}
// (404 "No traces found" when the window is empty).
func (s *Source) query(ctx context.Context, base, service string, since, until time.Time) ([]*Span, error) {
	u, err := url.Parse(strings.TrimRight(base, "/") + "/api/v3/traces")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("traces url %q is not an http(s) URL of a Jaeger query endpoint, such as http://localhost:16686", base)
	}
	if s.o.AllowURL != nil {
		if err := s.o.AllowURL(u); err != nil {
			return nil, fmt.Errorf("traces url %s: %w", u.Redacted(), err)
		}
	}
	q := url.Values{}
	q.Set("query.service_name", service)
	q.Set("query.start_time_min", since.UTC().Format(time.RFC3339Nano))
	q.Set("query.start_time_max", until.UTC().Format(time.RFC3339Nano))
	q.Set("query.num_traces", strconv.Itoa(s.o.MaxTraces))
	u.RawQuery = q.Encode()
	where := u.Redacted()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("querying Jaeger at %s: %w", where, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.o.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("querying Jaeger at %s (is it running, and is url its query port, 16686 by default?): %w", where, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("reading Jaeger's answer from %s: %w", where, err)
	}
	if len(body) > maxResponse {
		return nil, fmt.Errorf("jaeger's answer from %s is over %d MiB: shorten lookback", where, maxResponse>>20)
	}
	var env struct {
		Result *tracesData `json:"result"`
		Error  *struct {
			HTTPCode int    `json:"httpCode"`
			Message  string `json:"message"`
		} `json:"error"`
	}
	jsonErr := json.Unmarshal(body, &env)
	if resp.StatusCode != http.StatusOK {
		if jsonErr == nil && env.Error != nil {
			if resp.StatusCode == http.StatusNotFound && strings.EqualFold(env.Error.Message, "No traces found") {
				return nil, nil
			}
			return nil, fmt.Errorf("jaeger at %s answered %s: %s", where, resp.Status, env.Error.Message)
		}
		return nil, fmt.Errorf("jaeger at %s answered %s: %s (is url Jaeger's query endpoint, serving /api/v3?)", where, resp.Status, snippet(body))
	}
	if jsonErr != nil {
		return nil, fmt.Errorf("jaeger's answer from %s is not the OTLP JSON of /api/v3/traces: %w (it starts %s)", where, jsonErr, snippet(body))
	}
	if env.Result == nil {
		return nil, fmt.Errorf("jaeger's answer from %s has no result: %s", where, snippet(body))
	}
	spans, err := env.Result.spans()
	if err != nil {
		return nil, fmt.Errorf("jaeger's answer from %s: %w", where, err)
	}
	if n := countTraces(spans); n >= s.o.MaxTraces {
		s.o.Logger.Warn("jaeger returned as many traces as asked for: the window may hold more, which were not read; shorten lookback",
			"url", where, "traces", n)
	}
	return spans, nil
}

func countTraces(spans []*Span) int {
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.TraceID] = true
	}
	return len(ids)
}

// snippet is the start of a body, for an error message.
func snippet(b []byte) string {
	const n = 200
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strconv.Quote(s)
}
