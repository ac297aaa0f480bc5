package remote

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/pool/wire"
)

// TLSConfig is the client side of the pool's mutual TLS: caFile signed the
// pool's certificate, certFile/keyFile are this client's.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the sandbox pool client certificate (sandbox.cert, sandbox.key): %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the sandbox pool CA (sandbox.ca): %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the sandbox pool CA %s holds no PEM certificate", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, Certificates: []tls.Certificate{cert}}, nil
}

// Rung is the pool's rung seen from here: its name and isolation are the
// pool's, so spec ladders and min_isolation mean what they mean locally.
func (p *Pool) Rung() sandbox.Rung { return &Rung{p: p} }

// Rung makes sandboxes in the pool.
type Rung struct{ p *Pool }

func (r *Rung) Name() string             { return r.p.hello.Rung }
func (r *Rung) Isolation() sandbox.Level { return r.p.hello.Isolation }

// Probe asks the pool again: a pool that stopped answering does not work.
func (r *Rung) Probe(ctx context.Context) sandbox.Probe {
	pr := sandbox.Probe{Rung: r.Name(), Isolation: r.Isolation(), Works: true}
	var h wire.Hello
	if err := r.p.do(ctx, http.MethodGet, wire.PathHello, nil, &h); err != nil {
		pr.Works, pr.Reason = false, err.Error()
	}
	return pr
}

// RemoveLayer deletes a setup snapshot in the pool (environment's
// layerRemover).
func (r *Rung) RemoveLayer(ctx context.Context, l sandbox.Layer) error {
	if l.Ref == "" {
		return nil
	}
	return r.p.release(ctx, l.Ref)
}

// Create leases a sandbox. The config travels without anything that names
// a place on this machine: Root, a layer's Dir, StateDir and Owner are
// this host's and never sent; a layer must be a snapshot of the pool's,
// and a proxy one the pool runs.
func (r *Rung) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Sandbox, error) {
	if cfg.Root != "" {
		return nil, fmt.Errorf("creating a pool sandbox: a local image root (%s) cannot travel to the pool: name the image and its digest", cfg.Root)
	}
	req := wire.CreateRequest{
		Image: cfg.Image, ImageDigest: cfg.ImageDigest, Workdir: cfg.Workdir, Env: cfg.Env, User: cfg.User,
		ReadOnlyRoot: cfg.ReadOnlyRoot, CommandTimeout: cfg.CommandTimeout, Run: cfg.Run,
		Limits: wire.Limits{MemoryMB: cfg.Limits.MemoryMB, PidsMax: cfg.Limits.PidsMax, FileSizeMB: cfg.Limits.FileSizeMB,
			CPUs: cfg.Limits.CPUs, Cgroup: cfg.Limits.Cgroup, DiskMB: cfg.Limits.DiskMB},
	}
	r.p.mu.Lock()
	if ref, ok := r.p.refs[cfg.ImageDigest]; ok && cfg.ImageDigest != "" {
		req.Image = ref
	}
	r.p.mu.Unlock()
	for _, l := range cfg.Layers {
		if l.Ref == "" {
			return nil, fmt.Errorf("creating a pool sandbox: layer %s is a directory here, not a snapshot of the pool's", l.Dir)
		}
		req.Snapshots = append(req.Snapshots, l.Ref)
	}
	pol, err := wirePolicy(cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("creating a pool sandbox: %w", err)
	}
	req.Policy = pol
	var c wire.Created
	if err := r.p.do(ctx, http.MethodPost, wire.PathSandboxes, req, &c); err != nil {
		return nil, fmt.Errorf("creating a sandbox in the pool %s: %w", r.p.addr, err)
	}
	r.p.track(c.ID)
	s := &Sandbox{p: r.p, id: c.ID, done: make(chan struct{})}
	s.setReport(c.Report)
	caps := r.p.hello.Capabilities
	// Snapshot and SetPolicy exist on the sandbox only when the pool says
	// it supports them: the engine asks by type, so each combination is a
	// type of its own.
	switch {
	case caps.Snapshot && caps.SetPolicy:
		return snapPolicySandbox{s}, nil
	case caps.Snapshot:
		return snapSandbox{s}, nil
	case caps.SetPolicy:
		return policySandbox{s}, nil
	}
	return s, nil
}

// wirePolicy names the proxy by its pool id; any other address (a unix
// path, a host:port) is this machine's and means nothing in the pool.
func wirePolicy(p sandbox.Policy) (wire.Policy, error) {
	w := wire.Policy{Network: p.Network, AllowHosts: p.AllowHosts}
	if p.ProxyAddr != "" {
		id, ok := strings.CutPrefix(p.ProxyAddr, wire.ProxyPrefix)
		if !ok {
			return w, fmt.Errorf("policy proxy_addr %q is not a proxy of the sandbox pool (start egress proxies through the pool's Egress)", p.ProxyAddr)
		}
		w.Proxy = id
	}
	return w, nil
}

// Sandbox is a sandbox leased from the pool.
type Sandbox struct {
	p  *Pool
	id string

	mu     sync.Mutex
	report sandbox.Report
	closed bool
	done   chan struct{} // closed by Close: stops the services' pollers
	svcs   []*service
	wg     sync.WaitGroup
}

func (s *Sandbox) setReport(rep *sandbox.Report) {
	if rep == nil {
		return
	}
	r := *rep
	r.Notes = append(append([]string{}, r.Notes...), fmt.Sprintf("leased from the sandbox pool at %s (sandbox %s)", s.p.addr, s.id))
	s.mu.Lock()
	s.report = r
	s.mu.Unlock()
}

// ID is the pool's id of the lease.
func (s *Sandbox) ID() string { return s.id }

func (s *Sandbox) path(sub string) string { return wire.PathSandboxes + "/" + s.id + sub }

// Report is the pool's report of the sandbox, noting the lease.
func (s *Sandbox) Report() sandbox.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.report
	r.Limits = append([]string(nil), r.Limits...)
	r.Notes = append([]string(nil), r.Notes...)
	return r
}

// Exec runs a command in the pool, assembling its streamed output; the
// command is killed there when ctx ends.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	resp, err := s.p.request(ctx, http.MethodPost, s.path("/exec"), bytes.NewReader(b), "application/json")
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("exec in pool sandbox %s: %w", s.id, err)
	}
	defer resp.Body.Close()
	limit := req.OutputLimit
	if limit <= 0 {
		limit = sandbox.DefaultOutputLimit
	}
	var stdout, stderr []byte
	truncated := false
	// The pool's rung already capped the output; a pool sending more is
	// cut here, as the local rung would. What is kept goes to req.Output
	// as its frame arrives (the pool sends frames as its rung gives them
	// out), so the hook gets exactly a prefix of the result's streams,
	// from this goroutine only, and never after Exec returns.
	appendCapped := func(dst, chunk []byte, isStderr bool) []byte {
		if room := limit - len(dst); len(chunk) > room {
			truncated = true
			chunk = chunk[:max(room, 0)]
		}
		if len(chunk) > 0 && req.Output != nil {
			req.Output(isStderr, chunk)
		}
		return append(dst, chunk...)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var f wire.ExecFrame
		if err := dec.Decode(&f); err != nil {
			if ctx.Err() != nil {
				return sandbox.ExecResult{}, ctx.Err()
			}
			return sandbox.ExecResult{}, &PoolError{Addr: s.p.addr, Op: "exec in sandbox " + s.id, Err: fmt.Errorf("the output stream ended before the result: %w", err)}
		}
		switch {
		case f.Error != "":
			return sandbox.ExecResult{}, fmt.Errorf("exec in pool sandbox %s: %s", s.id, f.Error)
		case f.Result != nil:
			res := *f.Result
			res.Stdout, res.Stderr = stdout, stderr
			res.Truncated = res.Truncated || truncated
			return res, nil
		}
		stdout = appendCapped(stdout, f.Stdout, false)
		stderr = appendCapped(stderr, f.Stderr, true)
	}
}

func (s *Sandbox) filePath(p string) string { return s.path("/files") + "?path=" + url.QueryEscape(p) }

// ReadFile reads a file, up to the pool's per-file cap.
func (s *Sandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	resp, err := s.p.request(ctx, http.MethodGet, s.filePath(p), nil, "")
	if err != nil {
		var re *remoteError
		if errors.As(err, &re) && re.status == http.StatusNotFound {
			return nil, fmt.Errorf("reading %s in pool sandbox %s: %s: %w", p, s.id, re.msg, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("reading %s in pool sandbox %s: %w", p, s.id, err)
	}
	defer resp.Body.Close()
	max := s.p.hello.Capabilities.MaxFileBytes
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, &PoolError{Addr: s.p.addr, Op: "reading " + p, Err: err}
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("reading %s in pool sandbox %s: over the pool's cap of %d bytes per file", p, s.id, max)
	}
	return b, nil
}

// WriteFile writes a file, refusing one over the pool's per-file cap
// before sending it.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if max := s.p.hello.Capabilities.MaxFileBytes; int64(len(data)) > max {
		return fmt.Errorf("writing %s in pool sandbox %s: %d bytes, over the pool's cap of %d bytes per file", p, s.id, len(data), max)
	}
	u := s.filePath(p) + "&mode=" + fmt.Sprintf("%o", mode.Perm())
	resp, err := s.p.request(ctx, http.MethodPut, u, bytes.NewReader(data), wire.ContentBytes)
	if err != nil {
		return fmt.Errorf("writing %s in pool sandbox %s: %w", p, s.id, err)
	}
	resp.Body.Close()
	return nil
}

// StartService starts the sandbox's service in the pool; its state is
// polled in the background until it exits or the sandbox closes.
func (s *Sandbox) StartService(ctx context.Context, req sandbox.ExecRequest) (sandbox.Service, error) {
	if !s.p.hello.Capabilities.Service {
		return nil, fmt.Errorf("starting a service in pool sandbox %s: the pool's %s rung offers none: %w", s.id, s.p.hello.Rung, errors.ErrUnsupported)
	}
	var c wire.Created
	if err := s.p.do(ctx, http.MethodPost, s.path("/services"), req, &c); err != nil {
		return nil, fmt.Errorf("starting a service in pool sandbox %s: %w", s.id, err)
	}
	svc := &service{}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("starting a service: the sandbox is closed")
	}
	s.wg.Add(1)
	s.svcs = append(s.svcs, svc)
	s.mu.Unlock()
	go s.poll(c.ID, svc)
	return svc, nil
}

// servicePoll is how often a service's state is fetched.
const servicePoll = 250 * time.Millisecond

func (s *Sandbox) poll(id string, svc *service) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(servicePoll)
	defer t.Stop()
	for {
		var st wire.ServiceState
		if err := s.p.do(ctx, http.MethodGet, s.path("/services/"+id), nil, &st); err == nil {
			svc.set(st)
			if st.Exited {
				return
			}
		} else if ctx.Err() == nil {
			s.p.logger.Debug("polling a pool service", "sandbox", s.id, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// service is a pool service's last known state.
type service struct {
	mu sync.Mutex
	st wire.ServiceState
}

func (v *service) set(st wire.ServiceState) { v.mu.Lock(); v.st = st; v.mu.Unlock() }

// endedWithSandbox marks a service still running when its sandbox
// closed: the pool killed it with the sandbox.
func (v *service) endedWithSandbox() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.st.Exited {
		v.st.Exited, v.st.Code = true, -1
	}
}
func (v *service) Exited() (int, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.st.Code, v.st.Exited
}
func (v *service) Output() []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]byte(nil), v.st.Output...)
}

// Close gives the sandbox back; the pool kills what it runs. Idempotent.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.wg.Wait()
	err := s.p.release(ctx, s.id)
	s.mu.Lock()
	for _, svc := range s.svcs {
		svc.endedWithSandbox()
	}
	s.mu.Unlock()
	if err != nil {
		var re *remoteError
		if errors.As(err, &re) && re.status == http.StatusNotFound {
			return nil // expired already: gone either way
		}
		return fmt.Errorf("closing pool sandbox %s: %w", s.id, err)
	}
	return nil
}

// snapshot freezes the sandbox's changes into a snapshot of the pool's.
func (s *Sandbox) snapshot(ctx context.Context) (sandbox.Layer, error) {
	var c wire.Created
	if err := s.p.do(ctx, http.MethodPost, s.path("/snapshot"), nil, &c); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshotting pool sandbox %s: %w", s.id, err)
	}
	s.p.track(c.ID)
	return sandbox.Layer{Ref: c.ID}, nil
}

// setPolicy widens the sandbox's network through a pool proxy.
func (s *Sandbox) setPolicy(pol sandbox.Policy) error {
	w, err := wirePolicy(pol)
	if err != nil {
		return fmt.Errorf("widening pool sandbox %s: %w", s.id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var c wire.Created
	if err := s.p.do(ctx, http.MethodPost, s.path("/policy"), w, &c); err != nil {
		return fmt.Errorf("widening pool sandbox %s: %w", s.id, err)
	}
	s.setReport(c.Report)
	return nil
}

type snapSandbox struct{ *Sandbox }

func (s snapSandbox) Snapshot(ctx context.Context) (sandbox.Layer, error) { return s.snapshot(ctx) }

type policySandbox struct{ *Sandbox }

func (s policySandbox) SetPolicy(p sandbox.Policy) error { return s.setPolicy(p) }

type snapPolicySandbox struct{ *Sandbox }

func (s snapPolicySandbox) Snapshot(ctx context.Context) (sandbox.Layer, error) {
	return s.snapshot(ctx)
}
func (s snapPolicySandbox) SetPolicy(p sandbox.Policy) error { return s.setPolicy(p) }
