// Package remote is the client of a sandbox pool (`evalsid sandboxd`,
// package sandbox/pool): a rung whose sandboxes are leased from the pool
// over HTTPS with mutual TLS, the pool's image store, and egress proxies
// that run beside the pool's sandboxes with their events streamed back.
// A *Pool is what embedded.HostOptions.Pool takes.
package remote

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"evals.si/sandbox/pool/wire"
)

// Options configure Dial.
type Options struct {
	// Address is the pool's host:port (sandbox.address).
	Address string
	// TLS holds the client certificate and the CA that signed the pool's
	// (see TLSConfig).
	TLS    *tls.Config
	Logger *slog.Logger
}

// Pool is a connection to a sandbox pool. Close it to give back what it
// still holds.
type Pool struct {
	addr   string
	base   string
	client *http.Client
	hello  wire.Hello
	logger *slog.Logger

	mu   sync.Mutex
	live map[string]bool // ids kept alive
	// refs maps a digest this client resolved to the reference it was
	// resolved by (mirrors applied), which Create sends: the spec's own
	// reference might not reach the same registry from the pool.
	refs map[string]string
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// Dial says hello to the pool (which checks both certificates) and starts
// keeping its leases alive.
func Dial(ctx context.Context, o Options) (*Pool, error) {
	if o.Address == "" {
		return nil, errors.New("sandbox pool: no address (sandbox.address, --sandbox-address)")
	}
	if o.TLS == nil {
		return nil, errors.New("sandbox pool: no TLS configuration: the pool takes only clients with a certificate (sandbox.ca, sandbox.cert, sandbox.key)")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	tc := o.TLS.Clone()
	tc.MinVersion = tls.VersionTLS13
	p := &Pool{
		addr: o.Address, base: "https://" + o.Address, logger: o.Logger,
		client: &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16}},
		live:   map[string]bool{}, refs: map[string]string{}, done: make(chan struct{}),
	}
	if err := p.do(ctx, http.MethodGet, wire.PathHello, nil, &p.hello); err != nil {
		return nil, err
	}
	p.wg.Add(1)
	go p.keepalive()
	return p, nil
}

// Hello is what the pool said it is and can do.
func (p *Pool) Hello() wire.Hello { return p.hello }

// Close stops the keepalives and gives back every object still leased
// (what is not given back expires with its lease).
func (p *Pool) Close() error {
	p.once.Do(func() { close(p.done) })
	p.wg.Wait()
	p.mu.Lock()
	ids := make([]string, 0, len(p.live))
	for id := range p.live {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, id := range ids {
		if err := p.release(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	p.client.CloseIdleConnections()
	return errors.Join(errs...)
}

func (p *Pool) track(id string) {
	p.mu.Lock()
	p.live[id] = true
	p.mu.Unlock()
}

func (p *Pool) untrack(id string) {
	p.mu.Lock()
	delete(p.live, id)
	p.mu.Unlock()
}

// release deletes an object by its id's kind.
func (p *Pool) release(ctx context.Context, id string) error {
	var path string
	switch {
	case hasPrefix(id, "sb-"):
		path = wire.PathSandboxes + "/" + id
	case hasPrefix(id, "snap-"):
		path = wire.PathSnapshots + "/" + id
	case hasPrefix(id, "px-"):
		path = wire.PathProxies + "/" + id
	default:
		return nil
	}
	err := p.do(ctx, http.MethodDelete, path, nil, nil)
	p.untrack(id)
	return err
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// keepalive renews every live lease every third of the TTL.
func (p *Pool) keepalive() {
	defer p.wg.Done()
	every := p.hello.Capabilities.LeaseTTL / 3
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
		}
		p.mu.Lock()
		ids := make([]string, 0, len(p.live))
		for id := range p.live {
			ids = append(ids, id)
		}
		p.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		var res wire.KeepaliveResult
		err := p.do(ctx, http.MethodPost, wire.PathKeepalive, wire.Keepalive{IDs: ids}, &res)
		cancel()
		if err != nil {
			p.logger.Warn("keeping sandbox pool leases alive", "pool", p.addr, "err", err)
			continue
		}
		for _, id := range res.Gone {
			p.logger.Warn("the sandbox pool no longer holds a lease of this client's", "pool", p.addr, "id", id)
			p.untrack(id)
		}
	}
}

// PoolError is a failure to talk to the pool (not a sandbox's answer): an
// infrastructure error.
type PoolError struct {
	Addr, Op string
	Err      error
}

func (e *PoolError) Error() string {
	return fmt.Sprintf("sandbox pool %s: %s: %v (check sandbox.address, that the pool is running, that sandbox.ca signed the pool's certificate and the pool's client CA signed sandbox.cert)", e.Addr, e.Op, e.Err)
}
func (e *PoolError) Unwrap() error { return e.Err }

// remoteError is the pool's answer to a request it refused.
type remoteError struct {
	status int
	msg    string
	code   string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Is(target error) bool {
	return target == errors.ErrUnsupported && e.code == wire.CodeUnsupported
}

// request sends a request and returns the response when it is 2xx.
func (p *Pool) request(ctx context.Context, method, path string, body io.Reader, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &PoolError{Addr: p.addr, Op: method + " " + path, Err: err}
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var e wire.Error
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(b))
		}
		return nil, &remoteError{status: resp.StatusCode, msg: e.Error, code: e.Code}
	}
	return resp, nil
}

// do sends in as JSON (nil: no body) and decodes the answer into out.
func (p *Pool) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := p.request(ctx, method, path, body, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return &PoolError{Addr: p.addr, Op: method + " " + path, Err: fmt.Errorf("decoding the answer: %w", err)}
	}
	return nil
}
