package pool

import (
	"sync"

	"evals.si/egress"
)

// maxQueuedEvents bounds the events a proxy keeps for a client that is not
// reading them; past it the oldest are dropped and the drop is counted.
const maxQueuedEvents = 10000

// proxy is an egress proxy in the pool with its events queued for the
// client's event stream.
type proxy struct {
	h egress.Handle

	mu      sync.Mutex
	events  []egress.Event
	dropped int
	closed  bool
	wake    chan struct{} // closed and replaced when events arrive or the proxy closes
}

func newProxy(h egress.Handle) *proxy { return &proxy{h: h, wake: make(chan struct{})} }

func (p *proxy) push(ev egress.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if len(p.events) >= maxQueuedEvents {
		p.events = p.events[1:]
		p.dropped++
	}
	p.events = append(p.events, ev)
	close(p.wake)
	p.wake = make(chan struct{})
}

// take returns the queued events, whether the proxy is closed, and a
// channel that is closed when there is more.
func (p *proxy) take() ([]egress.Event, bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	evs := p.events
	p.events = nil
	return evs, p.closed, p.wake
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
