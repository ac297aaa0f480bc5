package model

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"
)

// Call is one Chat call of a connector built by New, as a CallObserver sees
// it: the engine times a trial's calls with it, and the trace export makes
// spans of those no trajectory event records (a failed call, the judge's).
type Call struct {
	// Provider is the connector: openai, anthropic or scripted.
	Provider string
	// RequestModel is the model asked for (the request's, else the
	// connector's configured model).
	RequestModel string
	// Response is the reply; zero when Err is set.
	Response   Response
	Err        error
	Start, End time.Time
}

// CallObserver is told of each call made with a context carrying it.
type CallObserver func(Call)

type observerKey struct{}

// WithCallObserver returns ctx carrying f: every Chat of a connector from
// New made with it (or a context derived from it) reports to f when it
// returns. An inner observer replaces an outer one.
func WithCallObserver(ctx context.Context, f CallObserver) context.Context {
	return context.WithValue(ctx, observerKey{}, f)
}

// observed is what New returns: the connector, its replies stamped with
// the provider, its calls reported to the context's observer.
type observed struct {
	Connector
	provider, model string
}

func (o observed) Chat(ctx context.Context, req Request) (Response, error) {
	f, _ := ctx.Value(observerKey{}).(CallObserver)
	start := time.Now()
	resp, err := o.Connector.Chat(ctx, req)
	if err == nil && resp.Provider == "" {
		resp.Provider = o.provider
	}
	if f != nil {
		m := req.Model
		if m == "" {
			m = o.model
		}
		f(Call{Provider: o.provider, RequestModel: m, Response: resp, Err: err, Start: start, End: time.Now()})
	}
	return resp, err
}

// unwrap returns the connector New built, for checks of its kind.
func unwrap(c Connector) Connector {
	if o, ok := c.(observed); ok {
		return o.Connector
	}
	return c
}

// ErrorType classifies a failed call for OTel's error.type, a low
// cardinality value: the HTTP status of an API error ("429", "500"),
// "timeout", "canceled", "connection" (the endpoint could not be reached),
// else "_OTHER".
func ErrorType(err error) string {
	if status, _, ok := apiError(err); ok && status > 0 {
		return strconv.Itoa(status)
	}
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &oe):
		return "connection"
	}
	return "_OTHER"
}
