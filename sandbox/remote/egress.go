package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"evals.si/egress"
	"evals.si/environment"
	"evals.si/image"
	"evals.si/sandbox/pool/wire"
)

// Egress starts egress proxies in the pool, beside its sandboxes.
func (p *Pool) Egress() egress.Host { return egressHost{p} }

type egressHost struct{ p *Pool }

// StartProxy starts a proxy in the pool; its events stream back to
// onEvent until the proxy closes.
func (h egressHost) StartProxy(ctx context.Context, pol egress.Policy, onEvent func(egress.Event)) (egress.Handle, error) {
	pol.SocketDir = ""
	var c wire.Created
	if err := h.p.do(ctx, http.MethodPost, wire.PathProxies, wire.ProxyRequest{Policy: pol}, &c); err != nil {
		return nil, fmt.Errorf("starting an egress proxy in the sandbox pool %s: %w", h.p.addr, err)
	}
	h.p.track(c.ID)
	ph := &proxyHandle{p: h.p, id: c.ID, done: make(chan struct{})}
	ectx, cancel := context.WithCancel(context.Background())
	ph.cancel = cancel
	go ph.events(ectx, onEvent)
	return ph, nil
}

type proxyHandle struct {
	p      *Pool
	id     string
	cancel context.CancelFunc
	done   chan struct{} // closed when the event stream ended
	once   sync.Once
}

// Addr is the pool's name for the proxy, which a pool sandbox's policy
// takes.
func (h *proxyHandle) Addr() string { return wire.ProxyPrefix + h.id }

func (h *proxyHandle) SetPolicy(pol egress.Policy) error {
	pol.SocketDir = ""
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.p.do(ctx, http.MethodPut, wire.PathProxies+"/"+h.id+"/policy", wire.ProxyRequest{Policy: pol}, nil); err != nil {
		return fmt.Errorf("setting the policy of pool proxy %s: %w", h.id, err)
	}
	return nil
}

// eventDrain bounds waiting, at Close, for the events the proxy reported
// before it closed.
const eventDrain = 5 * time.Second

// Close closes the proxy in the pool and waits (briefly) for the last of
// its events, so an attempt made just before is still reported.
func (h *proxyHandle) Close() error {
	var err error
	h.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = h.p.release(ctx, h.id)
		select {
		case <-h.done:
		case <-time.After(eventDrain):
		}
		h.cancel()
	})
	if err != nil {
		return fmt.Errorf("closing pool proxy %s: %w", h.id, err)
	}
	return nil
}

// events streams the proxy's events to onEvent until the pool says the
// proxy closed. A stream that breaks (the connection, the pool's restart
// of a listener) is asked for again after the last event received, so no
// event the pool still holds is lost or delivered twice.
func (h *proxyHandle) events(ctx context.Context, onEvent func(egress.Event)) {
	defer close(h.done)
	var after int64
	wait := 100 * time.Millisecond
	for {
		closed, got, err := h.stream(ctx, &after, onEvent)
		if closed || ctx.Err() != nil {
			return
		}
		var re *remoteError
		if errors.As(err, &re) && re.status == http.StatusNotFound {
			return // the proxy is gone (closed, or its lease expired)
		}
		h.p.logger.Warn("a pool proxy's event stream broke; asking again from the last event", "proxy", h.id, "after", after, "err", err)
		if got {
			wait = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// stream reads one event stream from after on, advancing after; it
// reports whether the pool said the proxy closed and whether any line came.
func (h *proxyHandle) stream(ctx context.Context, after *int64, onEvent func(egress.Event)) (closed, got bool, err error) {
	resp, err := h.p.request(ctx, http.MethodGet, wire.PathProxies+"/"+h.id+"/events?after="+strconv.FormatInt(*after, 10), nil, "")
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev wire.ProxyEvent
		if err := dec.Decode(&ev); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // a stream ends with Closed
			}
			return false, got, err
		}
		got = true
		switch {
		case ev.Closed:
			return true, got, nil
		case ev.Dropped > 0:
			h.p.logger.Warn("a pool proxy dropped events this client had not read (it keeps the latest 10000)", "proxy", h.id, "dropped", ev.Dropped)
		case ev.Event != nil && ev.Seq > *after:
			*after = ev.Seq
			if onEvent != nil {
				onEvent(*ev.Event)
			}
		}
	}
}

// Images resolves images in the pool's store: the pool runs exactly the
// image it resolved, and the answer holds its config, not its root.
func (p *Pool) Images() environment.ImageResolver { return images{p} }

type images struct{ p *Pool }

func (i images) Resolve(ctx context.Context, ref string) (*image.Image, error) {
	return i.resolve(ctx, wire.ImageRequest{Ref: ref})
}

// ResolveVerified sends the keys as PEM text: a key named by a file is read
// here, where the spec is, never in the pool.
func (i images) ResolveVerified(ctx context.Context, ref string, keys []string, allowLocal bool) (*image.Image, error) {
	req := wire.ImageRequest{Ref: ref, Verified: true, AllowLocal: allowLocal}
	for _, k := range keys {
		if !strings.Contains(k, "-----BEGIN") {
			b, err := os.ReadFile(k)
			if err != nil {
				return nil, fmt.Errorf("reading key: %w", err)
			}
			k = string(b)
		}
		req.Keys = append(req.Keys, k)
	}
	return i.resolve(ctx, req)
}

func (i images) resolve(ctx context.Context, req wire.ImageRequest) (*image.Image, error) {
	var img wire.Image
	if err := i.p.do(ctx, http.MethodPost, wire.PathImages, req, &img); err != nil {
		return nil, err
	}
	if img.Digest != "" {
		i.p.mu.Lock()
		i.p.refs[img.Digest] = req.Ref
		i.p.mu.Unlock()
	}
	return &image.Image{Ref: img.Ref, Source: img.Source, Digest: img.Digest, Env: img.Env, WorkingDir: img.WorkingDir, User: img.User}, nil
}
