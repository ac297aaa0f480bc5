package remote

import (
	"context"
	"time"
)

// Call is one call to a remote agent (a turn), as a CallObserver sees it:
// the engine keeps a trial's calls, and the trace export makes a span of
// each, failed ones included (an event records only what came back).
type Call struct {
	// Kind is the agent kind's name ("http agent").
	Kind       string
	Start, End time.Time
	Err        error
}

// CallObserver is told of each call made with a context carrying it.
type CallObserver func(Call)

type observerKey struct{}

// WithCallObserver returns ctx carrying f.
func WithCallObserver(ctx context.Context, f CallObserver) context.Context {
	return context.WithValue(ctx, observerKey{}, f)
}

func observe(ctx context.Context, c Call) {
	if f, ok := ctx.Value(observerKey{}).(CallObserver); ok {
		f(c)
	}
}
