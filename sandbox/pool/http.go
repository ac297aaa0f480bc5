package pool

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"evals.si/egress"
	"evals.si/image"
	"evals.si/sandbox"
	"evals.si/sandbox/pool/wire"
)

// Handler serves the API. Every request must come over TLS with a verified
// client certificate (ServerTLS); one without is refused here too, so the
// handler is never served in the clear by mistake.
//
// A request counts against its client's MaxRequests while it is served,
// unless it is registered uncounted: one that frees or keeps what the
// client holds (hello, keepalive, close) must get through a busy client's
// limit, and a proxy's event stream lives as long as the proxy.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	type handler = func(w http.ResponseWriter, r *http.Request, owner string) error
	route := func(pattern string, counted bool, f handler) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
				writeErr(w, http.StatusUnauthorized, errors.New("the sandbox pool needs a client certificate signed by its client CA"))
				return
			}
			owner := Identity(r.TLS.VerifiedChains[0])
			if counted {
				release, err := s.admit(owner)
				if err != nil {
					s.o.Logger.Info("sandbox pool request refused: the client is at its limit of requests in flight", "client", owner, "path", r.URL.Path, "max_requests", s.o.MaxRequests)
					w.Header().Set("Retry-After", "1")
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusTooManyRequests)
					json.NewEncoder(w).Encode(wire.Error{Error: err.Error(), Code: wire.CodeBusy})
					return
				}
				defer release()
			}
			if err := f(w, r, owner); err != nil {
				status := http.StatusBadRequest
				var nf errNotYours
				switch {
				case errors.As(err, &nf):
					status = http.StatusNotFound
				case errors.Is(err, errors.ErrUnsupported):
					status = http.StatusNotImplemented
				}
				writeErr(w, status, err)
			}
		})
	}
	h := func(pattern string, f handler) { route(pattern, true, f) }
	uncounted := func(pattern string, f handler) { route(pattern, false, f) }
	uncounted("GET "+wire.PathHello, s.hello)
	h("POST "+wire.PathImages, s.resolve)
	uncounted("POST "+wire.PathKeepalive, s.keepaliveHTTP)
	h("POST "+wire.PathSandboxes, s.create)
	h("POST "+wire.PathSandboxes+"/{id}/exec", s.exec)
	h("GET "+wire.PathSandboxes+"/{id}/files", s.readFile)
	h("PUT "+wire.PathSandboxes+"/{id}/files", s.writeFile)
	h("POST "+wire.PathSandboxes+"/{id}/services", s.startService)
	h("GET "+wire.PathSandboxes+"/{id}/services/{sid}", s.service)
	h("POST "+wire.PathSandboxes+"/{id}/snapshot", s.snapshot)
	h("POST "+wire.PathSandboxes+"/{id}/policy", s.setPolicy)
	uncounted("DELETE "+wire.PathSandboxes+"/{id}", func(w http.ResponseWriter, r *http.Request, owner string) error {
		return s.deleted(w, s.remove(r.Context(), owner, "sandbox", r.PathValue("id")))
	})
	uncounted("DELETE "+wire.PathSnapshots+"/{id}", func(w http.ResponseWriter, r *http.Request, owner string) error {
		return s.deleted(w, s.remove(r.Context(), owner, "snapshot", r.PathValue("id")))
	})
	h("POST "+wire.PathProxies, s.startProxy)
	uncounted("GET "+wire.PathProxies+"/{id}/events", s.proxyEvents)
	h("PUT "+wire.PathProxies+"/{id}/policy", s.proxyPolicy)
	uncounted("DELETE "+wire.PathProxies+"/{id}", func(w http.ResponseWriter, r *http.Request, owner string) error {
		return s.deleted(w, s.remove(r.Context(), owner, "proxy", r.PathValue("id")))
	})
	return mux
}

func writeErr(w http.ResponseWriter, status int, err error) {
	e := wire.Error{Error: err.Error()}
	if errors.Is(err, errors.ErrUnsupported) {
		e.Code = wire.CodeUnsupported
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e)
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(v)
}

// readJSON decodes a bounded request body.
func readJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 16<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding the request: %w", err)
	}
	return nil
}

func (s *Server) deleted(w http.ResponseWriter, err error) error {
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) hello(w http.ResponseWriter, r *http.Request, owner string) error {
	return writeJSON(w, wire.Hello{Rung: s.o.Rung.Name(), Isolation: s.o.Rung.Isolation(), Identity: owner, Capabilities: s.caps})
}

func (s *Server) keepaliveHTTP(w http.ResponseWriter, r *http.Request, owner string) error {
	var k wire.Keepalive
	if err := readJSON(r, &k); err != nil {
		return err
	}
	return writeJSON(w, wire.KeepaliveResult{Gone: s.keepalive(owner, k.IDs)})
}

// image resolves ref in the pool's store, refusing references that are
// paths of the pool's machine unless the pool allows them.
func (s *Server) image(ctx context.Context, req wire.ImageRequest) (*image.Image, error) {
	if err := s.checkRegistry(ctx, req.Ref); err != nil {
		return nil, err
	}
	if s.o.ClusterImages {
		return clusterImage(req)
	}
	if s.o.Images == nil {
		return nil, errors.New("this sandbox pool has no image store")
	}
	if image.IsLocal(req.Ref) && !s.o.AllowLocalImages {
		return nil, fmt.Errorf("image %q is a path on the pool's machine, which the pool does not serve: push it to a registry the pool can reach", req.Ref)
	}
	if !req.Verified {
		return s.o.Images.Resolve(ctx, req.Ref)
	}
	for _, k := range req.Keys {
		// A key that is not PEM text would be read as a file of the pool's.
		if !strings.Contains(k, "-----BEGIN") {
			return nil, errors.New("image_signatures keys must reach the pool as PEM text, not file names")
		}
	}
	return s.o.Images.ResolveVerified(ctx, req.Ref, req.Keys, req.AllowLocal)
}

// clusterImage is a reference the cluster resolves: nothing is fetched,
// and its digest is what the reference pins, if anything.
func clusterImage(req wire.ImageRequest) (*image.Image, error) {
	if image.IsLocal(req.Ref) {
		return nil, fmt.Errorf("image %q is a path, but this pool's images are pulled by the cluster's kubelets: push it to a registry the cluster can reach", req.Ref)
	}
	if req.Verified {
		return nil, errors.New("image_signatures cannot be checked by a pod-rung pool: the cluster's kubelets pull its images, so enforce signatures with the cluster's admission policy (for example a Kyverno or sigstore policy-controller rule) and drop image_signatures from the run")
	}
	img := &image.Image{Ref: req.Ref}
	if i := strings.LastIndex(req.Ref, "@"); i >= 0 {
		img.Digest = req.Ref[i+1:]
	}
	return img, nil
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request, owner string) error {
	var req wire.ImageRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	img, err := s.image(r.Context(), req)
	if err != nil {
		return fmt.Errorf("resolving %s in the pool: %w", req.Ref, err)
	}
	return writeJSON(w, wire.Image{Ref: img.Ref, Source: img.Source, Digest: img.Digest, Env: img.Env, WorkingDir: img.WorkingDir, User: img.User})
}

// config turns a client's request into the rung's config, mapping every id
// to the pool's own object and refusing what is not the client's. Its
// limits are the client's bounded by the pool's (Options.Limits); notes
// say which the pool chose, for the sandbox's isolation report.
func (s *Server) config(ctx context.Context, owner string, req wire.CreateRequest) (cfg sandbox.Config, ids map[string]string, notes []string, err error) {
	cfg = sandbox.Config{Workdir: req.Workdir, Env: req.Env, User: req.User, ReadOnlyRoot: req.ReadOnlyRoot}
	switch req.Limits.Cgroup {
	case "", "auto", "off":
		cfg.Limits.Cgroup = req.Limits.Cgroup
	default:
		return cfg, nil, nil, fmt.Errorf("limits.cgroup %q: a pool sandbox takes auto or off (a directory is the pool's to choose)", req.Limits.Cgroup)
	}
	lim, notes, err := s.o.Limits.apply(wire.LimitValues{MemoryMB: req.Limits.MemoryMB, PidsMax: req.Limits.PidsMax, CPUs: req.Limits.CPUs,
		DiskMB: req.Limits.DiskMB, FileSizeMB: req.Limits.FileSizeMB, CommandTimeout: req.CommandTimeout}, req.Limits.Cgroup)
	if err != nil {
		return cfg, nil, nil, err
	}
	cfg.CommandTimeout = lim.CommandTimeout
	cfg.Limits.MemoryMB, cfg.Limits.PidsMax, cfg.Limits.CPUs = lim.MemoryMB, lim.PidsMax, lim.CPUs
	cfg.Limits.DiskMB, cfg.Limits.FileSizeMB = lim.DiskMB, lim.FileSizeMB
	if req.Image != "" {
		img, err := s.image(ctx, wire.ImageRequest{Ref: req.Image})
		if err != nil {
			return cfg, nil, nil, fmt.Errorf("resolving %s in the pool: %w", req.Image, err)
		}
		if img.Digest != req.ImageDigest {
			return cfg, nil, nil, fmt.Errorf("image %s is %s in the pool, not %q as the client resolved it: refusing to run another image", req.Image, img.Digest, req.ImageDigest)
		}
		cfg.Image, cfg.ImageDigest, cfg.Root = req.Image, img.Digest, img.Root
	} else if req.ImageDigest != "" {
		return cfg, nil, nil, errors.New("an image digest without an image reference")
	} else if !s.o.AllowHostRoot && !s.o.ClusterImages {
		return cfg, nil, nil, errors.New("the environment names no image, and this sandbox pool does not run sandboxes on its own machine's root: set environment.image, or start the pool with --allow-host-root where its root is meant for tasks (a pool container's image)")
	}
	for _, id := range req.Snapshots {
		o, err := s.get(owner, "snapshot", id)
		if err != nil {
			return cfg, nil, nil, err
		}
		cfg.Layers = append(cfg.Layers, *o.snap)
	}
	pol, ids, err := s.policy(owner, req.Policy)
	if err != nil {
		return cfg, nil, nil, err
	}
	cfg.Policy = pol
	return cfg, ids, notes, nil
}

// policy maps a wire policy's proxy id to the proxy's socket; it returns
// the socket → id map reports are rewritten with.
func (s *Server) policy(owner string, p wire.Policy) (sandbox.Policy, map[string]string, error) {
	if !containsStr(s.caps.NetworkModes, p.Network) && p.Network != "" {
		return sandbox.Policy{}, nil, fmt.Errorf("network %q is not a mode of this pool (%s)", p.Network, strings.Join(s.caps.NetworkModes, ", "))
	}
	pol := sandbox.Policy{Network: p.Network, AllowHosts: p.AllowHosts}
	ids := map[string]string{}
	if p.Proxy != "" {
		o, err := s.get(owner, "proxy", p.Proxy)
		if err != nil {
			return pol, nil, err
		}
		pol.ProxyAddr = o.proxy.h.Addr()
		ids[pol.ProxyAddr] = wire.ProxyPrefix + p.Proxy
	}
	return pol, ids, nil
}

func containsStr(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// report names proxies by pool id, never by the pool's socket path.
func (l *leasedSandbox) report() *sandbox.Report {
	rep := l.sb.Report()
	l.mu.Lock()
	defer l.mu.Unlock()
	if id, ok := l.proxyIDs[rep.ProxyAddr]; ok {
		rep.ProxyAddr = id
	} else if rep.ProxyAddr != "" {
		rep.ProxyAddr = "pool"
	}
	rep.Notes = append(slices.Clone(rep.Notes), l.notes...)
	return &rep
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, owner string) error {
	var req wire.CreateRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	release, err := s.room(owner)
	if err != nil {
		return fmt.Errorf("creating a sandbox: %w", err)
	}
	defer release()
	cfg, ids, notes, err := s.config(r.Context(), owner, req)
	if err != nil {
		return fmt.Errorf("creating a sandbox: %w", err)
	}
	b := make([]byte, 8)
	rand.Read(b)
	cfg.StateDir = filepath.Join(s.o.StateDir, "sandboxes", fmt.Sprintf("%x", b))
	cfg.Owner = s.instance + " " + owner
	cfg.Run = req.Run
	sb, err := s.o.Rung.Create(r.Context(), cfg)
	if err != nil {
		return fmt.Errorf("creating a %s sandbox: %w", s.o.Rung.Name(), err)
	}
	l := &leasedSandbox{sb: sb, services: map[string]sandbox.Service{}, proxyIDs: ids, notes: notes}
	id := s.add("sb", owner, &object{sb: l})
	return writeJSON(w, wire.Created{ID: id, Report: l.report()})
}

func (s *Server) sandbox(r *http.Request, owner string) (*leasedSandbox, error) {
	o, err := s.get(owner, "sandbox", r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return o.sb, nil
}

// chunk is the largest output piece of one exec frame.
const chunk = 64 << 10

func (s *Server) exec(w http.ResponseWriter, r *http.Request, owner string) error {
	l, err := s.sandbox(r, owner)
	if err != nil {
		return err
	}
	var req sandbox.ExecRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	req.OutputLimit = min(req.OutputLimit, maxOutputLimit)
	req.Timeout = s.o.Limits.execTimeout(req.Timeout)
	w.Header().Set("Content-Type", wire.ContentNDJSON)
	enc := json.NewEncoder(w)
	frames := func(stderr bool, b []byte) error {
		for len(b) > 0 {
			n := min(len(b), chunk)
			f := wire.ExecFrame{Stdout: b[:n]}
			if stderr {
				f = wire.ExecFrame{Stderr: b[:n]}
			}
			if err := enc.Encode(f); err != nil {
				return err
			}
			b = b[n:]
		}
		return nil
	}
	// Output goes to the client as the rung gives it out, in frames
	// flushed at once, so a long command's output shows while it runs.
	// The hook writes under mu (a rung may call it from more than one
	// goroutine); sent is what each stream has had, so what the rung did
	// not give out live (a rung that streams less, or nothing) is sent
	// from the result afterwards, and the frames are the same as a
	// non-streaming pool's. Nothing is buffered here beyond the frame
	// being written: a slow client holds up the rung's delivery of its
	// output (the rungs deliver from a goroutine of their own), never the
	// command.
	var (
		mu   sync.Mutex
		sent [2]int
		// over: the response takes no more frames from the hook, since a
		// write failed (the client is gone) or Exec returned.
		over bool
	)
	rc := http.NewResponseController(w)
	req.Output = func(stderr bool, p []byte) {
		mu.Lock()
		defer mu.Unlock()
		if over || r.Context().Err() != nil {
			over = true
			return
		}
		i := 0
		if stderr {
			i = 1
		}
		if err := frames(stderr, p); err != nil {
			over = true
			return
		}
		sent[i] += len(p)
		if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			over = true
		}
	}
	// The request's context is the client's: when it goes away, the
	// command is killed.
	res, err := l.sb.Exec(r.Context(), req)
	mu.Lock()
	defer mu.Unlock()
	if over {
		return nil // the client is gone
	}
	over = true
	if err != nil {
		return enc.Encode(wire.ExecFrame{Error: err.Error()})
	}
	for i, b := range [2][]byte{res.Stdout, res.Stderr} {
		// What the hook was given is a prefix of the result's stream
		// (ExecRequest.Output): the rest follows it.
		if err := frames(i == 1, b[min(sent[i], len(b)):]); err != nil {
			return nil // the client is gone
		}
	}
	res.Stdout, res.Stderr = nil, nil
	return enc.Encode(wire.ExecFrame{Result: &res})
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request, owner string) error {
	l, err := s.sandbox(r, owner)
	if err != nil {
		return err
	}
	p := r.URL.Query().Get("path")
	b, err := l.sb.ReadFile(r.Context(), p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			writeErr(w, http.StatusNotFound, err)
			return nil
		}
		return err
	}
	if int64(len(b)) > s.o.MaxFileBytes {
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("reading %s: %d bytes, over the pool's cap of %d bytes per file", p, len(b), s.o.MaxFileBytes))
		return nil
	}
	w.Header().Set("Content-Type", wire.ContentBytes)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
	return nil
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, owner string) error {
	l, err := s.sandbox(r, owner)
	if err != nil {
		return err
	}
	p := r.URL.Query().Get("path")
	mode, err := strconv.ParseUint(r.URL.Query().Get("mode"), 8, 32)
	if err != nil {
		return fmt.Errorf("writing %s: mode: %w", p, err)
	}
	// The body has UploadTimeout to arrive whole: one trickled in would
	// hold a request of the client's and its buffer. The deadline is
	// lifted once it is read, so the write is not cut, nor (over HTTP/1)
	// the connection's read that watches for the client going away.
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(s.o.UploadTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("writing %s: setting the upload deadline: %w", p, err)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, s.o.MaxFileBytes+1))
	rc.SetReadDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("writing %s: reading the body (the pool gives an upload %s): %w", p, s.o.UploadTimeout, err)
	}
	if int64(len(b)) > s.o.MaxFileBytes {
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("writing %s: over the pool's cap of %d bytes per file", p, s.o.MaxFileBytes))
		return nil
	}
	if err := l.sb.WriteFile(r.Context(), p, b, fs.FileMode(mode)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) startService(w http.ResponseWriter, r *http.Request, owner string) error {
	l, err := s.sandbox(r, owner)
	if err != nil {
		return err
	}
	var req sandbox.ExecRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	// Each service holds the sandbox's limits of its own (a cgroup per
	// process tree), so their number bounds what one sandbox holds.
	b := make([]byte, 8)
	rand.Read(b)
	id := fmt.Sprintf("svc-%x", b)
	l.mu.Lock()
	if len(l.services) >= maxServices {
		l.mu.Unlock()
		return fmt.Errorf("starting a service: sandbox %s runs %d services, the pool's most per sandbox", r.PathValue("id"), maxServices)
	}
	l.services[id] = nil // reserved
	l.mu.Unlock()
	// The service outlives this request, as it outlives StartService's
	// context on a local rung.
	svc, err := l.sb.StartService(context.WithoutCancel(r.Context()), req)
	l.mu.Lock()
	if err != nil {
		delete(l.services, id)
	} else {
		l.services[id] = svc
	}
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return writeJSON(w, wire.Created{ID: id})
}

func (s *Server) service(w http.ResponseWriter, r *http.Request, owner string) error {
	l, err := s.sandbox(r, owner)
	if err != nil {
		return err
	}
	l.mu.Lock()
	svc, ok := l.services[r.PathValue("sid")]
	l.mu.Unlock()
	if !ok || svc == nil {
		return errNotYours{"service", r.PathValue("sid")}
	}
	code, exited := svc.Exited()
	return writeJSON(w, wire.ServiceState{Exited: exited, Code: code, Output: svc.Output()})
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, owner string) error {
	if !s.caps.Snapshot {
		return fmt.Errorf("snapshot: %w", errors.ErrUnsupported)
	}
	l, err := s.sandbox(r, owner)
	if err != nil {
		return err
	}
	snap, ok := l.sb.(sandbox.Snapshotter)
	if !ok {
		return fmt.Errorf("snapshot: the %s sandbox cannot: %w", s.o.Rung.Name(), errors.ErrUnsupported)
	}
	release, err := s.room(owner)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer release()
	layer, err := snap.Snapshot(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, wire.Created{ID: s.add("snap", owner, &object{snap: &layer})})
}

// policySetter is what sandboxes whose network can widen implement.
type policySetter interface{ SetPolicy(sandbox.Policy) error }

func (s *Server) setPolicy(w http.ResponseWriter, r *http.Request, owner string) error {
	if !s.caps.SetPolicy {
		return fmt.Errorf("set policy: %w", errors.ErrUnsupported)
	}
	l, err := s.sandbox(r, owner)
	if err != nil {
		return err
	}
	var p wire.Policy
	if err := readJSON(r, &p); err != nil {
		return err
	}
	pol, ids, err := s.policy(owner, p)
	if err != nil {
		return err
	}
	ps, ok := l.sb.(policySetter)
	if !ok {
		return fmt.Errorf("set policy: %w", errors.ErrUnsupported)
	}
	if err := ps.SetPolicy(pol); err != nil {
		return err
	}
	l.mu.Lock()
	for k, v := range ids {
		l.proxyIDs[k] = v
	}
	l.mu.Unlock()
	return writeJSON(w, wire.Created{ID: r.PathValue("id"), Report: l.report()})
}

func (s *Server) startProxy(w http.ResponseWriter, r *http.Request, owner string) error {
	var req wire.ProxyRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	release, err := s.room(owner)
	if err != nil {
		return fmt.Errorf("starting an egress proxy: %w", err)
	}
	defer release()
	pol, err := poolPolicy(req.Policy, s.o.AllowHosts)
	if err != nil {
		return fmt.Errorf("starting an egress proxy: %w", err)
	}
	pol.SocketDir = filepath.Join(s.o.StateDir, "proxy")
	p := newProxy(nil)
	// The proxy outlives this request: its lease decides.
	h, err := egress.Local{Logger: s.o.Logger}.StartProxy(context.WithoutCancel(r.Context()), pol, p.push)
	if err != nil {
		return err
	}
	p.h = h
	return writeJSON(w, wire.Created{ID: s.add("px", owner, &object{proxy: p})})
}

func (s *Server) proxyPolicy(w http.ResponseWriter, r *http.Request, owner string) error {
	o, err := s.get(owner, "proxy", r.PathValue("id"))
	if err != nil {
		return err
	}
	var req wire.ProxyRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	pol, err := poolPolicy(req.Policy, s.o.AllowHosts)
	if err != nil {
		return fmt.Errorf("setting a proxy's policy: %w", err)
	}
	if err := o.proxy.h.SetPolicy(pol); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// proxyEvents streams the proxy's events after ?after=N as NDJSON until
// it closes (a last Closed line), so a client whose stream broke asks
// again from where it was.
func (s *Server) proxyEvents(w http.ResponseWriter, r *http.Request, owner string) error {
	o, err := s.get(owner, "proxy", r.PathValue("id"))
	if err != nil {
		return err
	}
	var after int64
	if a := r.URL.Query().Get("after"); a != "" {
		if after, err = strconv.ParseInt(a, 10, 64); err != nil || after < 0 {
			return fmt.Errorf("proxy events: after %q: want the last sequence number received (0 or more)", a)
		}
	}
	ctx, cancel := o.proxy.reader(r.Context())
	defer cancel()
	w.Header().Set("Content-Type", wire.ContentNDJSON)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	enc := json.NewEncoder(w)
	for {
		evs, dropped, closed, more := o.proxy.since(after)
		if dropped > 0 {
			if err := enc.Encode(wire.ProxyEvent{Dropped: dropped}); err != nil {
				return nil
			}
		}
		for _, ev := range evs {
			if err := enc.Encode(ev); err != nil {
				return nil // the client is gone; it asks again
			}
			after = ev.Seq
		}
		if closed {
			enc.Encode(wire.ProxyEvent{Closed: true})
			rc.Flush()
			return nil
		}
		if len(evs) > 0 || dropped > 0 {
			rc.Flush()
		}
		if len(evs) == eventBatch {
			continue // more are held already
		}
		select {
		case <-more:
		case <-ctx.Done():
			return nil
		case <-s.done:
			return nil
		}
	}
}
