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
	"strconv"
	"strings"

	"evals.si/egress"
	"evals.si/image"
	"evals.si/sandbox"
	"evals.si/sandbox/pool/wire"
)

// Handler serves the API. Every request must come over TLS with a verified
// client certificate (ServerTLS); one without is refused here too, so the
// handler is never served in the clear by mistake.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	h := func(pattern string, f func(w http.ResponseWriter, r *http.Request, owner string) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.PeerCertificates) == 0 {
				writeErr(w, http.StatusUnauthorized, errors.New("the sandbox pool needs a client certificate signed by its client CA"))
				return
			}
			if err := f(w, r, Identity(r.TLS.PeerCertificates[0])); err != nil {
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
	h("GET "+wire.PathHello, s.hello)
	h("POST "+wire.PathImages, s.resolve)
	h("POST "+wire.PathKeepalive, s.keepaliveHTTP)
	h("POST "+wire.PathSandboxes, s.create)
	h("POST "+wire.PathSandboxes+"/{id}/exec", s.exec)
	h("GET "+wire.PathSandboxes+"/{id}/files", s.readFile)
	h("PUT "+wire.PathSandboxes+"/{id}/files", s.writeFile)
	h("POST "+wire.PathSandboxes+"/{id}/services", s.startService)
	h("GET "+wire.PathSandboxes+"/{id}/services/{sid}", s.service)
	h("POST "+wire.PathSandboxes+"/{id}/snapshot", s.snapshot)
	h("POST "+wire.PathSandboxes+"/{id}/policy", s.setPolicy)
	h("DELETE "+wire.PathSandboxes+"/{id}", func(w http.ResponseWriter, r *http.Request, owner string) error {
		return s.deleted(w, s.remove(r.Context(), owner, "sandbox", r.PathValue("id")))
	})
	h("DELETE "+wire.PathSnapshots+"/{id}", func(w http.ResponseWriter, r *http.Request, owner string) error {
		return s.deleted(w, s.remove(r.Context(), owner, "snapshot", r.PathValue("id")))
	})
	h("POST "+wire.PathProxies, s.startProxy)
	h("GET "+wire.PathProxies+"/{id}/events", s.proxyEvents)
	h("PUT "+wire.PathProxies+"/{id}/policy", s.proxyPolicy)
	h("DELETE "+wire.PathProxies+"/{id}", func(w http.ResponseWriter, r *http.Request, owner string) error {
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
// to the pool's own object and refusing what is not the client's.
func (s *Server) config(ctx context.Context, owner string, req wire.CreateRequest) (sandbox.Config, map[string]string, error) {
	cfg := sandbox.Config{
		Workdir: req.Workdir, Env: req.Env, User: req.User, ReadOnlyRoot: req.ReadOnlyRoot,
		CommandTimeout: req.CommandTimeout,
		Limits: sandbox.Limits{MemoryMB: req.Limits.MemoryMB, PidsMax: req.Limits.PidsMax, FileSizeMB: req.Limits.FileSizeMB,
			CPUs: req.Limits.CPUs, DiskMB: req.Limits.DiskMB},
	}
	switch req.Limits.Cgroup {
	case "", "auto", "off":
		cfg.Limits.Cgroup = req.Limits.Cgroup
	default:
		return cfg, nil, fmt.Errorf("limits.cgroup %q: a pool sandbox takes auto or off (a directory is the pool's to choose)", req.Limits.Cgroup)
	}
	if req.Image != "" {
		img, err := s.image(ctx, wire.ImageRequest{Ref: req.Image})
		if err != nil {
			return cfg, nil, fmt.Errorf("resolving %s in the pool: %w", req.Image, err)
		}
		if img.Digest != req.ImageDigest {
			return cfg, nil, fmt.Errorf("image %s is %s in the pool, not %q as the client resolved it: refusing to run another image", req.Image, img.Digest, req.ImageDigest)
		}
		cfg.Image, cfg.ImageDigest, cfg.Root = req.Image, img.Digest, img.Root
	} else if req.ImageDigest != "" {
		return cfg, nil, errors.New("an image digest without an image reference")
	}
	for _, id := range req.Snapshots {
		o, err := s.get(owner, "snapshot", id)
		if err != nil {
			return cfg, nil, err
		}
		cfg.Layers = append(cfg.Layers, *o.snap)
	}
	pol, ids, err := s.policy(owner, req.Policy)
	if err != nil {
		return cfg, nil, err
	}
	cfg.Policy = pol
	return cfg, ids, nil
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
	cfg, ids, err := s.config(r.Context(), owner, req)
	if err != nil {
		return fmt.Errorf("creating a sandbox: %w", err)
	}
	b := make([]byte, 8)
	rand.Read(b)
	cfg.StateDir = filepath.Join(s.o.StateDir, "sandboxes", fmt.Sprintf("%x", b))
	sb, err := s.o.Rung.Create(r.Context(), cfg)
	if err != nil {
		return fmt.Errorf("creating a %s sandbox: %w", s.o.Rung.Name(), err)
	}
	l := &leasedSandbox{sb: sb, services: map[string]sandbox.Service{}, proxyIDs: ids}
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
	// The request's context is the client's: when it goes away, the
	// command is killed.
	res, err := l.sb.Exec(r.Context(), req)
	w.Header().Set("Content-Type", wire.ContentNDJSON)
	enc := json.NewEncoder(w)
	if err != nil {
		return enc.Encode(wire.ExecFrame{Error: err.Error()})
	}
	for _, out := range []struct {
		b      []byte
		stderr bool
	}{{res.Stdout, false}, {res.Stderr, true}} {
		for b := out.b; len(b) > 0; {
			n := min(len(b), chunk)
			f := wire.ExecFrame{Stdout: b[:n]}
			if out.stderr {
				f = wire.ExecFrame{Stderr: b[:n]}
			}
			if err := enc.Encode(f); err != nil {
				return nil // the client is gone
			}
			b = b[n:]
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
	b, err := io.ReadAll(io.LimitReader(r.Body, s.o.MaxFileBytes+1))
	if err != nil {
		return fmt.Errorf("writing %s: reading the body: %w", p, err)
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
	// The service outlives this request, as it outlives StartService's
	// context on a local rung.
	svc, err := l.sb.StartService(context.WithoutCancel(r.Context()), req)
	if err != nil {
		return err
	}
	b := make([]byte, 8)
	rand.Read(b)
	id := fmt.Sprintf("svc-%x", b)
	l.mu.Lock()
	l.services[id] = svc
	l.mu.Unlock()
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
	if !ok {
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

// proxyEvents streams the proxy's events as NDJSON until it closes.
func (s *Server) proxyEvents(w http.ResponseWriter, r *http.Request, owner string) error {
	o, err := s.get(owner, "proxy", r.PathValue("id"))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", wire.ContentNDJSON)
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush()
	}
	enc := json.NewEncoder(w)
	for {
		evs, closed, more := o.proxy.take()
		for _, ev := range evs {
			if err := enc.Encode(ev); err != nil {
				return nil
			}
		}
		if fl != nil && len(evs) > 0 {
			fl.Flush()
		}
		if closed {
			return nil
		}
		select {
		case <-more:
		case <-r.Context().Done():
			return nil
		case <-s.done:
			return nil
		}
	}
}
