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
	"sort"
	"strings"
	"sync"
	"time"

	"evals.si/image"
	"evals.si/sandbox"
	"evals.si/spec"
)

// InfraError marks a failure of the environment itself (image, setup,
// sandbox): reported as an error, never as a score.
type InfraError struct {
	Phase string
	Err   error
}

func (e *InfraError) Error() string { return fmt.Sprintf("environment %s: %v", e.Phase, e.Err) }
func (e *InfraError) Unwrap() error { return e.Err }

// ImageResolver resolves image references to unpacked roots.
type ImageResolver interface {
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

	// own is this process's part of stateDir, claimed (and what stopped
	// engines left swept) when the first sandbox is made: every sandbox's
	// state and setup snapshot lives below it. owner labels sandboxes of
	// rungs that outlive the engine.
	claimOnce sync.Once
	claimErr  error
	own       *procDir
	owner     string

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
	return &Manager{images: images, rungs: rungs, stateDir: stateDir, logger: logger, prepared: map[string]*prepareCall{}}
}

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

// sweepTimeout bounds asking a rung (a Docker daemon) for what dead
// engines left; past it the leftovers wait for the next engine.
const sweepTimeout = 10 * time.Second

// Close removes the setup snapshots and whatever sandbox state this
// manager's sandboxes left; sandboxes made from it must be closed first.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	// Waits for a claim in progress, and keeps any from starting.
	m.claimOnce.Do(func() { m.claimErr = errors.New("the environment manager is closed") })
	var errs []error
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

// Prepared is an environment ready to make trial sandboxes.
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

	env     *spec.Environment
	base    sandbox.Config
	manager *Manager
}

// Identity is the key that decides whether two environments share setup:
// image, files, setup commands, env, workdir and setup network.
func Identity(env *spec.Environment) string {
	type key struct {
		Image        string
		Files        map[string]string
		Setup        []string
		SetupNetwork string
		Env          map[string]string
		Workdir      string
	}
	k := key{Image: image.Rewrite(env.ImageMirrors, env.Image), Files: env.Files, Setup: env.Setup, SetupNetwork: env.SetupNetwork, Env: env.Env}
	if env.Sandbox != nil {
		k.Workdir = env.Sandbox.Workdir
	}
	b, _ := json.Marshal(k) // maps marshal with sorted keys
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
}

// Prepare resolves, selects and sets up env, once per identity.
func (m *Manager) Prepare(ctx context.Context, env *spec.Environment, opts SetupOptions) (*Prepared, error) {
	if env == nil {
		env = &spec.Environment{}
	}
	id := Identity(env) + "-" + ladderKey(env)
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

func ladderKey(env *spec.Environment) string {
	sb := env.Sandbox
	if sb == nil {
		return "default"
	}
	return strings.Join(sb.Ladder, ",") + "|" + sb.MinIsolation
}

func (m *Manager) prepare(ctx context.Context, id string, env *spec.Environment, opts SetupOptions) (*Prepared, error) {
	pol := env.Sandbox
	if pol == nil {
		pol = &spec.SandboxPolicy{}
	}
	ladder := pol.Ladder
	if len(ladder) == 0 {
		ladder = sandbox.DefaultLadder()
	}
	var minLevel sandbox.Level
	if pol.MinIsolation != "" {
		l, err := sandbox.ParseLevel(pol.MinIsolation)
		if err != nil {
			return nil, err
		}
		minLevel = l
	}
	rung, probes, err := sandbox.Select(ctx, m.rungs, ladder, minLevel, pol.AllowUnsafeHost)
	if err != nil {
		return nil, &InfraError{Phase: "sandbox", Err: err}
	}
	p := &Prepared{ID: id, Rung: rung, Probes: probes, env: env, manager: m}
	workdir := pol.Workdir
	if workdir == "" {
		workdir = "/workspace"
	}
	p.Workdir = workdir
	p.base = sandbox.Config{
		Workdir:        workdir,
		Env:            map[string]string{},
		ReadOnlyRoot:   pol.ReadOnlyRoot,
		CommandTimeout: env.CommandTimeout.D(),
		Limits: sandbox.Limits{
			MemoryMB:   pol.MemoryMB,
			PidsMax:    pol.PidsMax,
			FileSizeMB: pol.FileSizeMB,
			CPUs:       pol.CgroupCPUs,
			Cgroup:     pol.Cgroup,
		},
		Policy: sandbox.Policy{Network: networkOr(pol.Network, sandbox.NetworkDeny), AllowHosts: pol.AllowHosts},
	}
	if env.Image != "" {
		if m.images == nil {
			return nil, &InfraError{Phase: "image", Err: errors.New("no image store configured")}
		}
		var img *image.Image
		var err error
		if sig := pol.ImageSignatures; sig != nil && len(sig.Keys) > 0 {
			img, err = m.images.ResolveVerified(ctx, image.Rewrite(env.ImageMirrors, env.Image), sig.Keys, sig.AllowLocal)
		} else {
			img, err = m.images.Resolve(ctx, image.Rewrite(env.ImageMirrors, env.Image))
		}
		if err != nil {
			return nil, &InfraError{Phase: "image", Err: fmt.Errorf("resolving %s: %w", env.Image, err)}
		}
		p.Image = img
		p.base.Root = img.Root
		p.base.Image = env.Image
		p.base.User = img.User
		for _, kv := range img.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				p.base.Env[k] = v
			}
		}
		if pol.Workdir == "" && img.WorkingDir != "" {
			p.Workdir = img.WorkingDir
			p.base.Workdir = img.WorkingDir
		}
	}
	for k, v := range env.Env {
		p.base.Env[k] = v
	}
	if len(env.Files) == 0 && len(env.Setup) == 0 {
		return p, nil
	}
	sb, err := m.create(ctx, rung, p.base, setupPolicy(env))
	if err != nil {
		return nil, &InfraError{Phase: "setup", Err: err}
	}
	defer sb.Close(context.WithoutCancel(ctx))
	if err := applySetup(ctx, sb, env, p.Workdir, opts, m.logger); err != nil {
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

func networkOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func setupPolicy(env *spec.Environment) sandbox.Policy {
	if env.SetupNetwork == "allow" {
		return sandbox.Policy{Network: sandbox.NetworkAllow}
	}
	return sandbox.Policy{Network: sandbox.NetworkDeny}
}

func (m *Manager) create(ctx context.Context, rung sandbox.Rung, cfg sandbox.Config, pol sandbox.Policy) (sandbox.Sandbox, error) {
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
	cfg.Policy = pol
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

// Policy is the trial policy the spec asks for; the engine fills ProxyAddr
// when it starts an egress proxy for an allowlist.
func (p *Prepared) Policy() sandbox.Policy { return p.base.Policy }

// NewSandbox creates a trial's sandbox, restored from the setup snapshot.
func (p *Prepared) NewSandbox(ctx context.Context, pol sandbox.Policy, opts SetupOptions) (sandbox.Sandbox, error) {
	cfg := p.base
	cfg.Env = make(map[string]string, len(p.base.Env))
	for k, v := range p.base.Env {
		cfg.Env[k] = v
	}
	if p.Layer != nil {
		cfg.Layers = []sandbox.Layer{*p.Layer}
	}
	sb, err := p.manager.create(ctx, p.Rung, cfg, pol)
	if err != nil {
		return nil, &InfraError{Phase: "sandbox", Err: err}
	}
	if p.Replay {
		if err := applySetup(ctx, sb, p.env, p.Workdir, opts, p.manager.logger); err != nil {
			sb.Close(context.WithoutCancel(ctx))
			return nil, &InfraError{Phase: "setup", Err: err}
		}
	}
	return sb, nil
}

// applySetup writes files (relative: workdir; absolute: root) then runs each
// setup command with sh -c in the workdir. Files go first so setup can use
// them (pip install -e .).
func applySetup(ctx context.Context, sb sandbox.Sandbox, env *spec.Environment, workdir string, opts SetupOptions, logger *slog.Logger) error {
	names := make([]string, 0, len(env.Files))
	for name := range env.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := name
		if !path.IsAbs(p) {
			p = path.Join(workdir, p)
		}
		if err := sb.WriteFile(ctx, p, []byte(env.Files[name]), 0o644); err != nil {
			return fmt.Errorf("writing file %s: %w", name, err)
		}
	}
	for i, cmd := range env.Setup {
		start := time.Now()
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", cmd}, Timeout: setupTimeout(env), OutputLimit: opts.OutputLimit})
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
