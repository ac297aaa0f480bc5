// Package pool is `evalsid sandboxd`: a sandbox pool that leases the
// sandboxes of its local rung to workers over HTTPS with mutual TLS
// (protocol: package sandbox/pool/wire; client: package sandbox/remote).
//
// The pool owns everything location-dependent: the image store, the setup
// snapshots, the egress proxies and the sandboxes' state. A client names
// them only by the ids the pool handed to it, so no client can make a
// sandbox over a path of the pool's machine (a root, a layer, a cgroup, a
// proxy socket such as Docker's) or touch another client's objects. Every
// object has a lease the client keeps alive; an expired one is closed.
package pool

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"sync"
	"time"

	"evals.si/egress"
	"evals.si/image"
	"evals.si/sandbox"
	"evals.si/sandbox/pool/wire"
)

// Images resolves image references in the pool's store.
type Images interface {
	Resolve(ctx context.Context, ref string) (*image.Image, error)
	ResolveVerified(ctx context.Context, ref string, keys []string, allowLocal bool) (*image.Image, error)
}

// Options configure a pool.
type Options struct {
	// Rung makes the sandboxes (bwrap, landlock).
	Rung sandbox.Rung
	// Images is the pool's image store; nil: sandboxes without an image
	// only, unless ClusterImages.
	Images Images
	// ClusterImages: image references are the cluster's, pulled by its
	// kubelets (the pod rung). The pool hands them to the rung as given,
	// never fetching them itself, and pins only what a reference pins
	// (name@sha256:…); signatures are the cluster's admission policy's to
	// enforce, so image_signatures is refused rather than skipped.
	ClusterImages bool
	// StateDir holds sandbox state, snapshots and proxy sockets.
	StateDir string
	// LeaseTTL is how long an object outlives its last keepalive
	// (default DefaultLeaseTTL).
	LeaseTTL time.Duration
	// MaxFileBytes caps one file transfer (default DefaultMaxFileBytes).
	MaxFileBytes int64
	// AllowLocalImages lets clients name images on the pool's own
	// filesystem (oci-layout:, docker-archive:, dir:). Off: a reference
	// that is a pool path is refused like any other path.
	AllowLocalImages bool
	// AllowHostRoot lets a sandbox whose environment names no image run on
	// the pool machine's own root (read-only), as a local rung's does. Off:
	// such a sandbox is refused, since a client's task would read the
	// pool's files (its /etc, its programs); the pod rung runs its default
	// image instead and ignores this.
	AllowHostRoot bool
	// AllowRegistries are the registries (host, or host:port) the pool
	// pulls from although they are on its own machine or a private
	// network; every other such registry is refused (see checkRegistry).
	// Open Images with RegistryTransport(AllowRegistries) so every
	// connection its pulls open is held to the same rule.
	AllowRegistries []string
	// MaxObjects bounds the sandboxes, snapshots and proxies one client
	// holds at once (default DefaultMaxObjects), so one client cannot
	// exhaust the pool.
	MaxObjects int
	// MaxRequests bounds the requests of one client in flight at once
	// (default DefaultMaxRequests): each may hold a command, a file of up
	// to MaxFileBytes or an output buffer in the pool's memory. Past it a
	// request is refused with 429 (wire.CodeBusy). Hello, keepalives,
	// closes and proxy event streams are not counted: they free or keep
	// what the client holds, and an event stream lives as long as its
	// proxy.
	MaxRequests int
	// UploadTimeout is how long a file's body may take to arrive (default
	// DefaultUploadTimeout), so a client trickling one in does not hold a
	// request and its buffer forever.
	UploadTimeout time.Duration
	// Limits are the pool's own bounds over its sandboxes' limits.
	Limits Limits
	// AllowHosts, when set, is the most any client's egress may reach: an
	// allowlist entry not in it, or network allow, is refused (the
	// operator's ceiling over what run specs ask for).
	AllowHosts []string
	// Sweeper, when set, is the rung's sweeper: at start the pool removes
	// the sandboxes an earlier pool process left (the pod rung's pods
	// outlive a killed sandboxd; its leases did not). Only one pool
	// process may serve one rung's sandboxes (one --pod-pool name).
	Sweeper sandbox.Sweeper
	Logger  *slog.Logger
}

// Defaults.
const (
	DefaultLeaseTTL     = 2 * time.Minute
	DefaultMaxFileBytes = 64 << 20
	DefaultMaxObjects   = 512
	// maxServices bounds the services one sandbox runs (a task has one;
	// the engine starts a checker's too).
	maxServices        = 4
	DefaultMaxRequests = 32
	// DefaultUploadTimeout is generous: a 64 MiB file at 256 KiB/s.
	DefaultUploadTimeout = 5 * time.Minute
	// maxOutputLimit caps what one command's output limit may ask the pool
	// to hold per stream.
	maxOutputLimit = 64 << 20
)

// Server is a running pool. Serve its Handler behind TLSConfig's listener.
type Server struct {
	o Options
	// instance names this pool process in its sandboxes' Config.Owner,
	// so the next process can tell what it left.
	instance string
	caps     wire.Capabilities
	mu       sync.Mutex
	objs     map[string]*object
	// pending counts, per client, the objects being made (room reserved
	// them, add has not registered them yet), so concurrent creates cannot
	// pass MaxObjects together.
	pending map[string]int
	// inflight counts, per client, its requests being served (MaxRequests).
	inflight map[string]int
	done     chan struct{}
	wg       sync.WaitGroup
	close    sync.Once
}

// object is one leased thing: exactly one of sb, snap and proxy is set.
type object struct {
	owner   string
	expires time.Time
	sb      *leasedSandbox
	snap    *sandbox.Layer
	proxy   *proxy
}

type leasedSandbox struct {
	sb sandbox.Sandbox
	mu sync.Mutex
	// services are the sandbox's services by id.
	services map[string]sandbox.Service
	// proxies maps the pool addresses this sandbox's reports name back to
	// ids.
	proxyIDs map[string]string
	// notes are added to its isolation report: the limits the pool chose.
	notes []string
}

// rungCapabilities are what each rung the pool can serve supports. They are
// declared, not discovered: a client offers exactly what the hello says.
func rungCapabilities(rung string) (wire.Capabilities, bool) {
	c := wire.Capabilities{
		NetworkModes: []string{sandbox.NetworkDeny, sandbox.NetworkAllowlist, sandbox.NetworkAllow},
		Limits:       []string{"memory_mb", "pids_max", "file_size_mb", "cpus", "disk_mb", "command_timeout"},
	}
	switch rung {
	case sandbox.RungBwrap:
		c.Snapshot, c.Service, c.SetPolicy = true, true, true
	case sandbox.RungLandlock:
		c.Snapshot, c.Service = true, true
	case "pod":
		// The pod rung reaches an egress proxy only at a TCP address its
		// pods can reach, which the pool's per-client proxies (unix
		// sockets) are not yet: deny only. No pids_max: Kubernetes has no
		// per-pod field.
		c.Service = true
		c.NetworkModes = []string{sandbox.NetworkDeny}
		c.Limits = []string{"memory_mb", "file_size_mb", "cpus", "disk_mb", "command_timeout"}
	default:
		return c, false
	}
	return c, true
}

// New starts a pool (its lease reaper) over o.Rung, which must work here.
func New(ctx context.Context, o Options) (*Server, error) {
	if o.Rung == nil {
		return nil, errors.New("sandbox pool: no rung")
	}
	caps, ok := rungCapabilities(o.Rung.Name())
	if !ok {
		return nil, fmt.Errorf("sandbox pool: rung %s cannot be served (bwrap or landlock)", o.Rung.Name())
	}
	if p := o.Rung.Probe(ctx); !p.Works {
		return nil, fmt.Errorf("sandbox pool: the %s rung does not work on this machine: %s", o.Rung.Name(), p.Reason)
	}
	if o.StateDir == "" {
		return nil, errors.New("sandbox pool: no state directory")
	}
	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("sandbox pool: state directory: %w", err)
	}
	o.StateDir = abs
	for _, d := range []string{"sandboxes", "proxy"} {
		if err := os.MkdirAll(filepath.Join(o.StateDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("sandbox pool: creating the state directory: %w", err)
		}
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.MaxObjects <= 0 {
		o.MaxObjects = DefaultMaxObjects
	}
	if o.MaxRequests <= 0 {
		o.MaxRequests = DefaultMaxRequests
	}
	if o.UploadTimeout <= 0 {
		o.UploadTimeout = DefaultUploadTimeout
	}
	if err := o.Limits.check(o.Rung.Name(), caps.Limits); err != nil {
		return nil, fmt.Errorf("sandbox pool: %w", err)
	}
	if !o.Limits.Max.IsZero() {
		m := o.Limits.Max
		caps.MaxLimits = &m
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	caps.MaxFileBytes, caps.LeaseTTL = o.MaxFileBytes, o.LeaseTTL
	s := &Server{o: o, instance: newInstance(), caps: caps, objs: map[string]*object{}, inflight: map[string]int{}, done: make(chan struct{})}
	s.wg.Add(1)
	go s.reap()
	if o.Sweeper != nil {
		// Every owner this process did not make is an earlier process's.
		n, err := o.Sweeper.Sweep(ctx, func(owner string) bool { return !strings.HasPrefix(owner, s.instance+" ") })
		if err != nil {
			s.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("sandbox pool: removing the sandboxes an earlier pool process left: %w", err)
		}
		if n > 0 {
			o.Logger.Info("removed sandboxes an earlier pool process left", "count", n)
		}
	}
	return s, nil
}

func newInstance() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "pool-" + hex.EncodeToString(b)
}

// Close closes every sandbox and proxy and removes every snapshot.
func (s *Server) Close(ctx context.Context) error {
	s.close.Do(func() { close(s.done) })
	s.wg.Wait()
	s.mu.Lock()
	objs := s.objs
	s.objs = map[string]*object{}
	s.mu.Unlock()
	var errs []error
	for id, o := range objs {
		if err := s.free(ctx, id, o); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reap closes what has outlived its lease.
func (s *Server) reap() {
	defer s.wg.Done()
	t := time.NewTicker(max(s.o.LeaseTTL/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-t.C:
			s.mu.Lock()
			var gone []string
			var objs []*object
			for id, o := range s.objs {
				if now.After(o.expires) {
					gone = append(gone, id)
					objs = append(objs, o)
					delete(s.objs, id)
				}
			}
			s.mu.Unlock()
			for i, id := range gone {
				s.o.Logger.Info("lease expired", "id", id, "owner", objs[i].owner)
				if err := s.free(context.Background(), id, objs[i]); err != nil {
					s.o.Logger.Warn("freeing an expired lease", "id", id, "err", err)
				}
			}
		}
	}
}

func (s *Server) free(ctx context.Context, id string, o *object) error {
	switch {
	case o.sb != nil:
		if err := o.sb.sb.Close(ctx); err != nil {
			return fmt.Errorf("closing sandbox %s: %w", id, err)
		}
	case o.snap != nil:
		if o.snap.Dir != "" {
			if err := os.RemoveAll(o.snap.Dir); err != nil {
				return fmt.Errorf("removing snapshot %s: %w", id, err)
			}
		}
	case o.proxy != nil:
		return o.proxy.close()
	}
	return nil
}

// add registers a new object of owner's and returns its id.
func (s *Server) add(kind, owner string, o *object) string {
	b := make([]byte, 16)
	rand.Read(b)
	id := kind + "-" + hex.EncodeToString(b)
	o.owner = owner
	o.expires = time.Now().Add(s.o.LeaseTTL)
	s.mu.Lock()
	s.objs[id] = o
	s.mu.Unlock()
	return id
}

// room reserves a place for one new object of owner's, refusing it when
// owner holds (or is making) MaxObjects already; release gives the place
// back once the object is registered with add, or was not made.
func (s *Server) room(owner string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.pending[owner]
	for _, o := range s.objs {
		if o.owner == owner {
			n++
		}
	}
	if n >= s.o.MaxObjects {
		return nil, fmt.Errorf("this client holds %d sandboxes, snapshots and proxies, the pool's limit: close some first", n)
	}
	if s.pending == nil {
		s.pending = map[string]int{}
	}
	s.pending[owner]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.pending[owner]--; s.pending[owner] <= 0 {
				delete(s.pending, owner)
			}
		})
	}, nil
}

// errNotYours is the one answer for an id that does not exist, expired,
// or is another client's: which of these it is is not the caller's to
// learn.
type errNotYours struct{ kind, id string }

func (e errNotYours) Error() string {
	return fmt.Sprintf("no %s %q of this client in the pool (expired, closed, or never handed to this client)", e.kind, e.id)
}

// get returns owner's object id of kind. Only keepalives renew a lease,
// so a client that stopped keeping one alive cannot revive it by using it.
func (s *Server) get(owner, kind, id string) (*object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[id]
	if !ok || o.owner != owner || !isKind(o, kind) {
		return nil, errNotYours{kind, id}
	}
	return o, nil
}

func isKind(o *object, kind string) bool {
	switch kind {
	case "sandbox":
		return o.sb != nil
	case "snapshot":
		return o.snap != nil
	case "proxy":
		return o.proxy != nil
	}
	return false
}

// remove takes owner's object id out of the pool and frees it.
func (s *Server) remove(ctx context.Context, owner, kind, id string) error {
	s.mu.Lock()
	o, ok := s.objs[id]
	if !ok || o.owner != owner || !isKind(o, kind) {
		s.mu.Unlock()
		return errNotYours{kind, id}
	}
	delete(s.objs, id)
	s.mu.Unlock()
	return s.free(ctx, id, o)
}

func (s *Server) keepalive(owner string, ids []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []string
	exp := time.Now().Add(s.o.LeaseTTL)
	for _, id := range ids {
		o, ok := s.objs[id]
		if !ok || o.owner != owner {
			gone = append(gone, id)
			continue
		}
		o.expires = exp
	}
	return gone
}

// Identity is who a verified client certificate chain (leaf first) names:
// the leaf's subject CN and serial, so two certificates with one CN from
// different issuances stay apart, and its issuer, so two CAs of the client
// CA bundle that issue the same CN and serial stay apart too. The issuer is
// a digest of its public key, not of its name: two CAs may carry the same
// name, never the same key (the leaf's signature proves which key issued
// it, so the digest is the same whichever verified chain names it), and a
// CA renewed over its key keeps its clients' identities. A chain of one is
// a certificate the bundle holds itself, its own issuer.
func Identity(chain []*x509.Certificate) string {
	leaf, issuer := chain[0], chain[0]
	if len(chain) > 1 {
		issuer = chain[1]
	}
	sum := sha256.Sum256(issuer.RawSubjectPublicKeyInfo)
	return fmt.Sprintf("CN=%s serial=%s issuer=%x", leaf.Subject.CommonName, leaf.SerialNumber.Text(16), sum[:8])
}

// admit counts one request of owner's in flight, refusing it when owner
// has MaxRequests already; release ends it.
func (s *Server) admit(owner string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.inflight[owner]; n >= s.o.MaxRequests {
		return nil, fmt.Errorf("this client has %d requests in flight in the sandbox pool, the most it serves one client at once (evalsid sandboxd --max-requests): nothing was done; retry once one finishes, or run fewer trials at once against this pool", n)
	}
	s.inflight[owner]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.inflight[owner]--; s.inflight[owner] <= 0 {
				delete(s.inflight, owner)
			}
		})
	}, nil
}

// TLSConfig is the pool's server side: TLS 1.3, and a client certificate
// signed by the client CA is required on every connection.
func TLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the pool's certificate (--tls-cert, --tls-key): %w", err)
	}
	pem, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the client CA (--client-ca): %w", err)
	}
	cas := x509.NewCertPool()
	if !cas.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the client CA %s holds no PEM certificate", clientCAFile)
	}
	return ServerTLS(cert, cas), nil
}

// ServerTLS is TLSConfig from loaded parts.
func ServerTLS(cert tls.Certificate, clientCAs *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
	}
}

// HTTPServer is the pool's HTTP server over tlsCfg (ServerTLS), errors
// logged to errorLog. Its timeouts bound a client that is slow to send a
// request or keeps an idle connection; none bounds a response, since an
// exec streams as long as its command runs and a proxy's events as long
// as the proxy lives. A slow upload is bounded in its handler
// (Options.UploadTimeout), JSON bodies by their size.
func (s *Server) HTTPServer(tlsCfg *tls.Config, errorLog *log.Logger) *http.Server {
	return &http.Server{Handler: s.Handler(), TLSConfig: tlsCfg, ErrorLog: errorLog,
		ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
}

// AddProxy adopts a proxy started in this process as owner's, for
// embedders and tests (the escape suite's test proxy): the pool's own API
// only ever starts egress.Local proxies.
func (s *Server) AddProxy(owner string, h egress.Handle) string {
	return s.add("px", owner, &object{proxy: newProxy(h)})
}
