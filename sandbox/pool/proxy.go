package pool

import (
	"context"
	"sync"

	"evals.si/egress"
	"evals.si/sandbox/pool/wire"
)

// maxQueuedEvents bounds the events a proxy keeps for its client's event
// stream; past it the oldest are dropped and the drop is counted.
const maxQueuedEvents = 10000

// eventBatch bounds the events one pass of a stream copies out.
const eventBatch = 256

// proxy is an egress proxy in the pool with its recent events numbered, so
// a client whose event stream broke asks again from the last it has and
// loses nothing the pool still holds.
type proxy struct {
	h egress.Handle

	mu sync.Mutex
	// events[i] has sequence number first+i; sequence numbers start at 1.
	events []egress.Event
	first  int64
	closed bool
	wake   chan struct{} // closed and replaced when events arrive or the proxy closes
	// stream ends the proxy's current event stream: a proxy has one
	// reader, and a client asking again (its stream broke) replaces it.
	stream context.CancelFunc
}

// reader makes ctx the proxy's one event stream, ending the one before.
func (p *proxy) reader(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	p.mu.Lock()
	if p.stream != nil {
		p.stream()
	}
	p.stream = cancel
	p.mu.Unlock()
	return ctx, cancel
}

func newProxy(h egress.Handle) *proxy { return &proxy{h: h, first: 1, wake: make(chan struct{})} }

func (p *proxy) push(ev egress.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if len(p.events) >= maxQueuedEvents {
		p.events = p.events[1:]
		p.first++
	}
	p.events = append(p.events, ev)
	close(p.wake)
	p.wake = make(chan struct{})
}

// since returns the events after sequence number after (and how many of
// those the pool no longer holds), whether the proxy is closed, and a
// channel that is closed when there is more.
func (p *proxy) since(after int64) (evs []wire.ProxyEvent, dropped int64, closed bool, more <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := after + 1
	if next < p.first {
		dropped = p.first - next
		next = p.first
	}
	for i := int(next - p.first); i < len(p.events) && len(evs) < eventBatch; i++ {
		ev := p.events[i]
		evs = append(evs, wire.ProxyEvent{Seq: p.first + int64(i), Event: &ev})
	}
	return evs, dropped, p.closed, p.wake
}

func (p *proxy) close() error {
	err := p.h.Close()
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.wake)
	}
	p.mu.Unlock()
	return err
}
