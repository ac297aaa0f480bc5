// Package environment turns a task's spec environment into sandboxes: it
// resolves the image, picks the rung from the ladder, runs setup once per
// distinct environment, snapshots the result and creates each trial's
// sandbox from that snapshot.
package environment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"evals.si/egress"
	"evals.si/image"
	"evals.si/internal/oncekey"
	"evals.si/sandbox"
	"evals.si/sandbox/warm"
	"evals.si/spec"
)

// InfraError marks a failure of the environment itself (image, setup,
// sandbox): reported as an error, never as a score.
type InfraError struct {
	Phase string
	Err   error
}

// Error is the failure without its phase: the phase is the trial's error
// kind, which every surface shows beside the message ("image: resolving
// image ..."), so it is not written into it as well.
func (e *InfraError) Error() string { return e.Err.Error() }
func (e *InfraError) Unwrap() error { return e.Err }

// ImageResolver resolves image references to unpacked roots.
type ImageResolver interface {
	// Resolve's errors name ref (the manager does not add it again).
	Resolve(ctx context.Context, ref string) (*image.Image, error)
	// ResolveVerified resolves ref only when a cosign signature by one of
	// keys covers it (sandbox.image_signatures).
	ResolveVerified(ctx context.Context, ref string, keys []string, allowLocal bool) (*image.Image, error)
}

// Manager prepares environments; it caches prepared environments by their
// identity, so setup runs once per distinct environment per process.
type Manager struct {
	images   ImageResolver
	rungs    []sandbox.Rung
	stateDir string
	logger   *slog.Logger
	// egress runs setup's egress proxies (nil: in this process).
	egress egress.Host

	// own is this process's part of stateDir, claimed (and what stopped
	// engines left swept) when the first sandbox is made: every sandbox's
	// state and setup snapshot lives below it. owner labels sandboxes of
	// rungs that outlive the engine.
	claimOnce sync.Once
	claimErr  error
	own       *procDir
	owner     string

	// warm keeps trial sandboxes of warmRungs ready per configuration
	// (nil: off); closer closes trial sandboxes off the trial's path.
	warm      *warm.Pools
	warmRungs map[string]bool
	closer    *warm.Closer

	mu       sync.Mutex
	prepared map[string]*prepareCall
	seq      int
	closed   bool
}

type prepareCall struct {
	done chan struct{}
	env  *Prepared
	err  error
}

// NewManager returns a Manager that keeps sandbox state under stateDir, in
// a directory of this process's own. Before its first sandbox it removes
// what engines that stopped without closing (killed, crashed) left: their
// sandbox roots, setup snapshots, the overlays still mounted for them, and
// the sandboxes of rungs that outlive an engine (Docker).
func NewManager(images ImageResolver, rungs []sandbox.Rung, stateDir string, logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.Default()
	}
	return &Manager{images: images, rungs: rungs, stateDir: stateDir, logger: logger, prepared: map[string]*prepareCall{},
		closer: warm.NewCloser(2*runtime.NumCPU(), logger)}
}

// WarmPools makes the trial sandboxes of the named rungs come from warm
// pools (package warm): made ahead per configuration, so a trial's create
// is a take. Call it before the first Prepare. Rungs with pools of their
// own (the microVM rungs' warm_pool) need none here.
func (m *Manager) WarmPools(rungs []string, o warm.Options) {
	if o.Logger == nil {
		o.Logger = m.logger
	}
	m.warm = warm.New(o)
	m.warmRungs = map[string]bool{}
	for _, r := range rungs {
		m.warmRungs[r] = true
	}
}

// WarmStats are the warm pools' takes so far (zero when pools are off).
func (m *Manager) WarmStats() warm.Stats {
	if m.warm == nil {
		return warm.Stats{}
	}
	return m.warm.Stats()
}

// SetEgress makes setup's egress proxies (setup_network: allow) run on h,
// where the rungs' sandboxes are (a sandbox pool's); by default they run in
// this process. Call it before the first Prepare.
func (m *Manager) SetEgress(h egress.Host) { m.egress = h }

// claim makes this process's directory, once; a manager that never makes a
// sandbox (listing runs) touches neither the state dir nor Docker.
func (m *Manager) claim() error {
	m.claimOnce.Do(func() {
		boot := bootID()
		if m.own, m.claimErr = claimStateDir(m.stateDir, m.logger); m.claimErr != nil {
			return
		}
		if boot != "" {
			m.owner = boot + " " + m.own.dir
		}
		dead := ownerDeadOn(boot)
		for _, r := range m.rungs {
			sw, ok := r.(sandbox.Sweeper)
			if !ok {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
			n, err := sw.Sweep(ctx, dead)
			cancel()
			if err != nil {
				m.logger.Warn("removing sandboxes stopped engines left", "rung", r.Name(), "err", err)
			}
			if n > 0 {
				m.logger.Info("removed sandboxes stopped engines left", "rung", r.Name(), "count", n)
			}
		}
	})
	return m.claimErr
}

// Sweep claims this process's state directory now and removes what
// stopped engines left, as the first sandbox would. A resumed run calls it
// before scheduling: one whose trials had all finished when its engine was
// killed makes no sandbox, and would otherwise leave the killed engine's
// state (and its Docker snapshots) behind.
func (m *Manager) Sweep() error {
	if err := m.claim(); err != nil {
		return fmt.Errorf("claiming the sandbox state directory: %w", err)
	}
	return nil
}

// layerRemover is implemented by rungs whose snapshots are not plain
// directories (Docker's are images).
type layerRemover interface {
	RemoveLayer(ctx context.Context, l sandbox.Layer) error
}

// removeLayer deletes a setup snapshot: through the rung that made it when
// it knows how, else its directory.
func removeLayer(r sandbox.Rung, l sandbox.Layer) error {
	if lr, ok := r.(layerRemover); ok {
		ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
		defer cancel()
		if err := lr.RemoveLayer(ctx, l); err != nil {
			return fmt.Errorf("removing setup snapshot: %w", err)
		}
	}
	if l.Dir != "" {
		if err := os.RemoveAll(l.Dir); err != nil {
			return fmt.Errorf("removing setup snapshot %s: %w", l.Dir, err)
		}
	}
	return nil
}

// drainTimeout bounds closing the warm and closing sandboxes at Close;
// what is left past it the next engine's sweep removes.
const drainTimeout = 2 * time.Minute

// sweepTimeout bounds asking a rung (a Docker daemon) for what dead
// engines left; past it the leftovers wait for the next engine.
const sweepTimeout = 10 * time.Second

// Close removes the setup snapshots and whatever sandbox state this
// manager's sandboxes left; sandboxes made from it must be closed first.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	// Warm and closing sandboxes stand on the setup snapshots: they go
	// first. Not under mu, which a sandbox being made takes.
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if m.warm != nil {
		if err := m.warm.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := m.closer.Wait(ctx); err != nil {
		errs = append(errs, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Waits for a claim in progress, and keeps any from starting.
	m.claimOnce.Do(func() { m.claimErr = errors.New("the environment manager is closed") })
	if ctx.Err() != nil {
		// Sandboxes are still being made or closed on the snapshots:
		// removing the state below them now would unmount what they
		// use mid-close. The directory stays claimed until this process
		// exits; the next engine's sweep removes it.
		return errors.Join(append(errs, fmt.Errorf("sandbox state %s left for the next engine's sweep: sandboxes were still closing after %v", m.stateDir, drainTimeout))...)
	}
	for id, c := range m.prepared {
		select {
		case <-c.done:
		default:
			continue // still preparing: its owner is gone with the process
		}
		if c.env != nil && c.env.Layer != nil {
			if err := removeLayer(c.env.Rung, *c.env.Layer); err != nil {
				errs = append(errs, err)
			}
		}
		delete(m.prepared, id)
	}
	if m.own != nil {
		if err := m.own.release(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Prepared is an environment set up and ready to make trial sandboxes. It
// holds only what setup depends on; each trial's sandbox gets the policy
// of its own record's environment (NewSandbox), never that of the
// environment that happened to prepare it.
type Prepared struct {
	ID      string
	Rung    sandbox.Rung
	Probes  []sandbox.Probe
	Image   *image.Image
	Workdir string
	// Layer is the setup snapshot; nil when there was nothing to set up or
	// the rung cannot snapshot (then Replay is true and each trial repeats
	// files and setup).
	Layer  *sandbox.Layer
	Replay bool

	env *spec.Environment
	// root is what every sandbox of this environment starts from: image,
	// root, user, workdir and environment variables. No policy or limits.
	root    sandbox.Config
	manager *Manager

	// verified are the image_signatures key sets checked against Image.
	verified oncekey.Group
}

// Identity is the key that decides whether two environments share setup:
// image, files, setup commands, env, workdir and setup network.
func Identity(env *spec.Environment) string {
	type key struct {
		Image        string
		Files        map[string]string
		Setup        []spec.SetupStep
		SetupNetwork string
		Env          map[string]string
		Workdir      string
	}
	k := key{Image: image.Rewrite(env.ImageMirrors, env.Image), Files: env.Files, Setup: env.Setup, SetupNetwork: env.SetupNetwork, Env: env.Env}
	if env.Sandbox != nil {
		k.Workdir = env.Sandbox.Workdir
	}
	return shortHash(k)
}

// shortHash hashes v's JSON (maps marshal with sorted keys).
func shortHash(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// SetupOptions are a run's settings for setup commands. They are not part of
// what an environment is: they do not change its identity, and the trial
// that asks first sets up an environment for every trial that shares it.
type SetupOptions struct {
	// OutputLimit caps each of stdout and stderr of a setup command (the
	// run's caps.command_output_kb; 0: the sandbox's default).
	OutputLimit int
	// Run is the run the sandboxes are for (sandbox.Config.Run).
	Run string
	// CloseNow makes a trial sandbox's Close return only once everything
	// in it is gone, instead of handing it to the background closer: for a
	// sandbox whose processes must not outlive it into what follows (the
	// agent's, before a fresh checker's sandbox grades).
	CloseNow bool
}

// Prepare resolves, selects and sets up env, once per setup identity and
// choice of rung. What it returns makes sandboxes for every environment of
// the same key; give each trial's own environment to NewSandbox.
func (m *Manager) Prepare(ctx context.Context, env *spec.Environment, opts SetupOptions) (*Prepared, error) {
	if env == nil {
		env = &spec.Environment{}
	}
	id := prepareKey(env)
	m.mu.Lock()
	c, ok := m.prepared[id]
	if !ok {
		c = &prepareCall{done: make(chan struct{})}
		m.prepared[id] = c
		m.mu.Unlock()
		c.env, c.err = m.prepare(ctx, id, env, opts)
		close(c.done)
		if c.err != nil {
			// Do not cache failures: a later trial (or retry) tries again.
			m.mu.Lock()
			delete(m.prepared, id)
			m.mu.Unlock()
		}
	} else {
		m.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.env, c.err
}

func prepareKey(env *spec.Environment) string { return Identity(env) + "-" + rungKey(env) }

// rungKey is what picks the rung and where setup runs on it: the ladder,
// min_isolation, allow_unsafe_host, cgroup and the VM rungs' settings. A snapshot belongs to the
// rung that made it, so environments that may choose different rungs never
// share one.
func rungKey(env *spec.Environment) string {
	sb := env.Sandbox
	if sb == nil {
		return "default"
	}
	return shortHash([]any{sb.Ladder, sb.MinIsolation, sb.AllowUnsafeHost, sb.Cgroup, sb.Firecracker, sb.QEMU})
}

// VMSettings are the spec's settings of the microVM rung named rung
// (sandbox.firecracker or sandbox.qemu), and its default_image; nil and ""
// for other rungs.
func VMSettings(pol *spec.SandboxPolicy, rung string) (*sandbox.VMSettings, string) {
	var b *spec.MicroVM
	switch rung {
	case sandbox.RungFirecracker:
		b = pol.Firecracker
	case sandbox.RungQEMU:
		b = pol.QEMU
	}
	if b == nil {
		return nil, ""
	}
	return &sandbox.VMSettings{Kernel: b.Kernel, Guest: b.Guest, WarmPool: b.WarmPool, VCPUs: b.VCPUs, MemoryMB: b.MemoryMB}, b.DefaultImage
}

func minLevel(pol *spec.SandboxPolicy) (sandbox.Level, error) {
	if pol == nil || pol.MinIsolation == "" {
		return 0, nil
	}
	return sandbox.ParseLevel(pol.MinIsolation)
}

func (m *Manager) prepare(ctx context.Context, id string, env *spec.Environment, opts SetupOptions) (*Prepared, error) {
	pol := env.Sandbox
	if pol == nil {
		pol = &spec.SandboxPolicy{}
	}
	min, err := minLevel(pol)
	if err != nil {
		return nil, err
	}
	ladder := pol.Ladder
	if len(ladder) == 0 {
		ladder = sandbox.DefaultLadderFor(min)
	}
	rungs := sandbox.RungsFor(m.rungs, func(name string) *sandbox.VMSettings { s, _ := VMSettings(pol, name); return s })
	rung, probes, err := sandbox.Select(ctx, rungs, ladder, min, pol.AllowUnsafeHost)
	if err != nil {
		return nil, &InfraError{Phase: "sandbox", Err: err}
	}
	p := &Prepared{ID: id, Rung: rung, Probes: probes, env: env, manager: m}
	workdir := pol.Workdir
	if workdir == "" {
		workdir = "/workspace"
	}
	p.Workdir = workdir
	p.root = sandbox.Config{Workdir: workdir, Env: map[string]string{}}
	_, defaultImage := VMSettings(pol, rung.Name())
	imageRef := env.Image
	if imageRef == "" {
		// A VM boots an image: one that names none gets the rung's
		// default_image (the rung refuses when there is none).
		imageRef = defaultImage
	}
	if imageRef != "" {
		if m.images == nil {
			return nil, &InfraError{Phase: "image", Err: errors.New("no image store configured")}
		}
		var img *image.Image
		var err error
		if sig := pol.ImageSignatures; sig != nil && len(sig.Keys) > 0 {
			img, err = m.images.ResolveVerified(ctx, image.Rewrite(env.ImageMirrors, imageRef), sig.Keys, sig.AllowLocal)
		} else {
			img, err = m.images.Resolve(ctx, image.Rewrite(env.ImageMirrors, imageRef))
		}
		if err != nil {
			// The resolver's error names the image it resolved; name the
			// spec's when image_mirrors changed it.
			if src := image.Rewrite(env.ImageMirrors, imageRef); src != imageRef {
				err = fmt.Errorf("%s through environment.image_mirrors: %w", imageRef, err)
			}
			return nil, &InfraError{Phase: "image", Err: err}
		}
		if sig := pol.ImageSignatures; sig != nil && len(sig.Keys) > 0 {
			p.verified.Passed(signatureKey(sig))
		}
		p.Image = img
		p.root.Root = img.Root
		p.root.Image = imageRef
		p.root.ImageDigest = img.Digest
		p.root.User = img.User
		for _, kv := range img.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				p.root.Env[k] = v
			}
		}
		if pol.Workdir == "" && img.WorkingDir != "" {
			p.Workdir = img.WorkingDir
			p.root.Workdir = img.WorkingDir
		}
	}
	for k, v := range env.Env {
		p.root.Env[k] = v
	}
	if len(env.Files) == 0 && len(env.Setup) == 0 {
		return p, nil
	}
	cfg := p.setupConfig(pol)
	cfg.Run = opts.Run // the run whose trial asked first
	sb, closeSetup, err := m.setupSandbox(ctx, rung, cfg)
	if err != nil {
		return nil, &InfraError{Phase: "setup", Err: err}
	}
	defer closeSetup()
	if err := applySetup(ctx, sb, env, opts, m.logger); err != nil {
		return nil, &InfraError{Phase: "setup", Err: err}
	}
	snap, ok := sb.(sandbox.Snapshotter)
	if !ok {
		p.Replay = true
		return p, nil
	}
	layer, err := snap.Snapshot(ctx)
	if err != nil {
		return nil, &InfraError{Phase: "snapshot", Err: err}
	}
	p.Layer = &layer
	return p, nil
}

// setupConfig is the sandbox setup runs in. Like docker build, it has
// neither the trials' limits nor a read-only root: setup is the task
// author's and its snapshot is shared by records whose trial policies
// differ, so it must not depend on whichever of them came first. Its
// network is setup_network.
func (p *Prepared) setupConfig(pol *spec.SandboxPolicy) sandbox.Config {
	cfg := p.root
	cfg.Limits = sandbox.Limits{Cgroup: pol.Cgroup}
	cfg.Policy = sandbox.Policy{Network: sandbox.NetworkDeny}
	if p.env.SetupNetwork == sandbox.NetworkAllow {
		cfg.Policy.Network = sandbox.NetworkAllow
	}
	return cfg
}

// setupSandbox creates the setup sandbox; with setup_network: allow its
// traffic goes through an allow-all egress proxy of its own, so setup
// reaches package indexes but not the engine's machine. The returned func
// closes both.
func (m *Manager) setupSandbox(ctx context.Context, rung sandbox.Rung, cfg sandbox.Config) (sandbox.Sandbox, func(), error) {
	var proxy egress.Handle
	if cfg.Policy.Network == sandbox.NetworkAllow {
		host := m.egress
		if host == nil {
			host = egress.Local{Logger: m.logger}
		}
		var err error
		if proxy, err = host.StartProxy(ctx, egress.Policy{AllowAll: true}, nil); err != nil {
			return nil, nil, fmt.Errorf("starting the setup's egress proxy: %w", err)
		}
		cfg.Policy.ProxyAddr = proxy.Addr()
	}
	sb, err := m.create(ctx, rung, cfg)
	if err != nil {
		if proxy != nil {
			proxy.Close()
		}
		return nil, nil, err
	}
	return sb, func() {
		sb.Close(context.WithoutCancel(ctx))
		if proxy != nil {
			proxy.Close()
		}
	}, nil
}

func (m *Manager) create(ctx context.Context, rung sandbox.Rung, cfg sandbox.Config) (sandbox.Sandbox, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errors.New("creating a sandbox: the environment manager is closed")
	}
	m.seq++
	n := m.seq
	m.mu.Unlock()
	if err := m.claim(); err != nil {
		return nil, fmt.Errorf("creating a sandbox: %w", err)
	}
	// Not created here: a rung that creates its state dir removes it when
	// the sandbox closes, so a long run does not collect one per trial.
	cfg.StateDir = filepath.Join(m.own.dir, fmt.Sprintf("sb-%d", n))
	cfg.Owner = m.owner
	sb, err := rung.Create(ctx, cfg)
	if err != nil {
		os.RemoveAll(cfg.StateDir)
		return nil, fmt.Errorf("creating %s sandbox: %w", rung.Name(), err)
	}
	return sb, nil
}

// TrialPolicy is the network policy env asks for (deny when unset); the
// engine fills ProxyAddr when it starts an egress proxy for it.
func TrialPolicy(env *spec.Environment) sandbox.Policy {
	pol := env.Sandbox
	if pol == nil {
		return sandbox.Policy{Network: sandbox.NetworkDeny}
	}
	return sandbox.Policy{Network: networkOr(pol.Network, sandbox.NetworkDeny), AllowHosts: pol.AllowHosts}
}

// CheckerPolicy is the network policy of env's checker: checker.network
// (with its allow_hosts) when set, else the trial's (TrialPolicy).
func CheckerPolicy(env *spec.Environment) sandbox.Policy {
	if c := env.Checker; c != nil && c.Network != "" {
		return sandbox.Policy{Network: c.Network, AllowHosts: c.AllowHosts}
	}
	return TrialPolicy(env)
}

// NewSandbox creates a trial's sandbox, restored from the setup snapshot,
// with env's own policy: network pol (from TrialPolicy, with the engine's
// proxy), limits, read-only root and command timeout. env must be the
// trial's environment and share p's setup (Prepare(env) returned p).
// Before the sandbox exists, env's image signatures are verified (once
// per distinct key set) and the rung is checked against env's
// min_isolation: an environment that shares an image or setup with another
// never borrows that one's checks.
func (p *Prepared) NewSandbox(ctx context.Context, env *spec.Environment, pol sandbox.Policy, opts SetupOptions) (sandbox.Sandbox, error) {
	if env == nil {
		env = &spec.Environment{}
	}
	if k := prepareKey(env); k != p.ID {
		return nil, &InfraError{Phase: "sandbox", Err: fmt.Errorf("the trial's environment (%s) does not share the prepared one's setup (%s): prepare it first", k, p.ID)}
	}
	sp := env.Sandbox
	if sp == nil {
		sp = &spec.SandboxPolicy{}
	}
	min, err := minLevel(sp)
	if err != nil {
		return nil, err
	}
	if got := p.Rung.Isolation(); got < min {
		return nil, &InfraError{Phase: "sandbox", Err: fmt.Errorf("%w: rung %s gives %s isolation, the environment asks for at least %s", sandbox.ErrNoRung, p.Rung.Name(), got, min)}
	}
	if err := p.verify(ctx, env); err != nil {
		return nil, err
	}
	cfg := p.root
	cfg.Env = make(map[string]string, len(p.root.Env))
	for k, v := range p.root.Env {
		cfg.Env[k] = v
	}
	cfg.ReadOnlyRoot = sp.ReadOnlyRoot
	cfg.Run = opts.Run
	cfg.CommandTimeout = env.CommandTimeout.D()
	cfg.Limits = sandbox.Limits{
		MemoryMB:   sp.MemoryMB,
		PidsMax:    sp.PidsMax,
		FileSizeMB: sp.FileSizeMB,
		DiskMB:     sp.DiskMB,
		CPUs:       sp.CgroupCPUs,
		Cgroup:     sp.Cgroup,
	}
	cfg.Policy = pol
	if p.Layer != nil {
		cfg.Layers = []sandbox.Layer{*p.Layer}
	}
	sb, err := p.manager.trialSandbox(ctx, p.Rung, cfg, !p.Replay, !opts.CloseNow)
	if err != nil {
		return nil, &InfraError{Phase: "sandbox", Err: err}
	}
	if p.Replay {
		if err := applySetup(ctx, sb, p.env, opts, p.manager.logger); err != nil {
			sb.Close(context.WithoutCancel(ctx))
			return nil, &InfraError{Phase: "setup", Err: err}
		}
	}
	return sb, nil
}

func signatureKey(sig *spec.ImageSignatures) string {
	keys := slices.Clone(sig.Keys)
	slices.Sort(keys)
	return shortHash([]any{keys, sig.AllowLocal})
}

// verify checks env's image_signatures against the prepared image, once
// per distinct key set; a failure is not kept, so a retry asks again.
func (p *Prepared) verify(ctx context.Context, env *spec.Environment) error {
	sig := (*spec.ImageSignatures)(nil)
	if env.Sandbox != nil {
		sig = env.Sandbox.ImageSignatures
	}
	if sig == nil || len(sig.Keys) == 0 || env.Image == "" {
		return nil
	}
	return p.verified.Do(ctx, signatureKey(sig), func(ctx context.Context) error {
		return p.verifyImage(ctx, env, sig)
	})
}

func (p *Prepared) verifyImage(ctx context.Context, env *spec.Environment, sig *spec.ImageSignatures) error {
	ref := image.Rewrite(env.ImageMirrors, env.Image)
	img, err := p.manager.images.ResolveVerified(ctx, ref, sig.Keys, sig.AllowLocal)
	if err != nil {
		return &InfraError{Phase: "image", Err: fmt.Errorf("verifying the signature of %s: %w", env.Image, err)}
	}
	if img.Root != p.Image.Root || img.Digest != p.Image.Digest {
		return &InfraError{Phase: "image", Err: fmt.Errorf("verifying the signature of %s: the signed image (%s) is not the one set up (%s)", env.Image, img.Digest, p.Image.Digest)}
	}
	return nil
}

func networkOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// applySetup writes files (relative: workdir; absolute: root) then runs each
// setup command with sh -c in the workdir. Files go first so setup can use
// them (pip install -e .).
func applySetup(ctx context.Context, sb sandbox.Sandbox, env *spec.Environment, opts SetupOptions, logger *slog.Logger) error {
	names := make([]string, 0, len(env.Files))
	for name := range env.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		// Relative names stay relative: the sandbox resolves them in its
		// own workdir, which on the host rung is not the configured path.
		if err := sb.WriteFile(ctx, path.Clean(name), []byte(env.Files[name]), 0o644); err != nil {
			return fmt.Errorf("writing file %s: %w", name, err)
		}
	}
	for i, step := range env.Setup {
		cmd := step.Run
		start := time.Now()
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", cmd}, User: step.User, Timeout: setupTimeout(env), OutputLimit: opts.OutputLimit})
		if err != nil {
			return fmt.Errorf("setup step %d (%q): %w", i+1, cmd, err)
		}
		logger.Debug("setup step", "step", i+1, "exit", res.ExitCode, "took", time.Since(start))
		if res.ExitCode != 0 || res.TimedOut {
			return fmt.Errorf("setup step %d (%q) exited %d%s: %s", i+1, cmd, res.ExitCode, timedOutNote(res.TimedOut), tail(res.Stdout, res.Stderr))
		}
	}
	return nil
}

func setupTimeout(env *spec.Environment) time.Duration {
	if d := env.CommandTimeout.D(); d > 30*time.Minute {
		return d
	}
	return 30 * time.Minute
}

func timedOutNote(b bool) string {
	if b {
		return " (timed out)"
	}
	return ""
}

func tail(out, errOut []byte) string {
	s := strings.TrimSpace(string(out) + "\n" + string(errOut))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}
