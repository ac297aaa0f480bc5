package planner

import (
	"net/http"
	"net/url"
	"runtime"
	"sync"

	"evals.si/model"
	"evals.si/spec"
)

// providerLimits gives each model provider of a run (connector and base
// URL) one adaptive concurrency limiter, shared by the target and the
// judge when they call the same provider, and caps every response body at
// the run's caps.model_response_mb.
type providerLimits struct {
	initial     int
	maxResponse int64

	mu    sync.Mutex
	byKey map[string]*model.Limiter
	order []*model.Limiter
}

func newProviderLimits(concurrency int, maxResponse int64) *providerLimits {
	if concurrency <= 0 {
		concurrency = 2 * runtime.NumCPU()
	}
	return &providerLimits{initial: concurrency, maxResponse: maxResponse, byKey: map[string]*model.Limiter{}}
}

// options returns o with an HTTP client whose requests to ref's provider
// go through the provider's limiter and whose response bodies are capped.
// The window starts at the run's concurrency and may grow to twice it
// (target and judge calls together).
func (p *providerLimits) options(o model.Options, ref spec.ModelRef) model.Options {
	if ref.Connector != model.ConnectorOpenAI && ref.Connector != model.ConnectorAnthropic {
		return o // no HTTP
	}
	key := ref.Connector + " " + ref.BaseURL
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.byKey[key]
	if !ok {
		name := ref.Connector
		if u, err := url.Parse(ref.BaseURL); err == nil && u.Host != "" {
			name += " " + u.Host
		}
		l = model.NewLimiter(name, p.initial, 2*p.initial)
		p.byKey[key] = l
		p.order = append(p.order, l)
	}
	o.HTTPClient = &http.Client{Transport: model.CapResponses(l.Transport(nil), p.maxResponse)}
	return o
}

// states snapshots every limiter, for live progress.
func (p *providerLimits) states() []model.LimiterState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]model.LimiterState, 0, len(p.order))
	for _, l := range p.order {
		out = append(out, l.State())
	}
	return out
}
