// Package docker is the "docker" sandbox rung (isolation level container):
// one container per sandbox through the Docker Engine API.
//
// The container runs docker's init (tini) with `sleep infinity` under it,
// with --network none unless the policy is allow (default bridge), memory
// and swap limited to MemoryMB, a pids limit (PidsMax, default 512), every
// capability dropped, no-new-privileges, and with ReadOnlyRoot a read-only
// root whose workdir and /tmp are anonymous volumes. It is force-removed,
// with its volumes, at Close.
//
// Images: a snapshot layer (Layer.Ref, an image ID) is used as is; else
// Config.Image when the daemon already holds it; else Config.Root is
// imported (docker import of a tar of the root) and cached under a tag
// derived from a key over the root's file list (path, mode, size, mtime);
// with neither, an almost empty image gets the host's /usr, /etc and
// /lib* bound read-only (/bin, /lib and /lib64 follow the host's symlinks;
// /sbin is an empty directory since docker's init is mounted there and
// /usr/sbin is on PATH). Directory layers are copied over the image in a
// temporary container and committed (overlay whiteouts in them are not
// applied).
//
// Exec uses the exec API. The API cannot kill an exec, so when a command
// ends or times out a second exec, as the command's user, SIGKILLs every
// process in the container except init and the keeper: this kills what the
// command left running and, on timeout, the command itself. Both need
// /bin/sh in the image. Init and the keeper (`sleep infinity`, or the proxy
// forwarder) run as KeeperUID, commands as Config.User, else the image's
// user, else root: without CAP_KILL a command cannot signal the keeper,
// whose death would stop the container. An exec
// that dies by SIGKILL under a memory limit when docker reports OOMKilled (or
// without any other SIGKILL source) is reported as an "oom" denial.
//
// Network allowlist keeps --network none: a host-side relay socket to the
// egress proxy (sandbox/bridge.Relay, connectable by the keeper's uid) and
// the engine binary are bound into the container, and the binary,
// re-executed as the sandbox/bridge forwarder, is the keeper: it listens on
// 127.0.0.1:3128 and relays to the socket; HTTP(S)_PROXY points at it. The
// engine binary must be static (CGO_ENABLED=0) unless the image has its
// loader, and the daemon must share the engine's filesystem (bind mounts).
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"

	"evals.si/sandbox"
	"evals.si/sandbox/bridge"
)

// Name is the rung's name in the ladder.
const Name = "docker"

// KeeperUID is the uid the container's init and keeper process run as: one
// that commands do not run as (unless Config.User names it), so they cannot
// kill the keeper. It is below 65536 to map under userns-remap.
const KeeperUID = "65533"

// DefaultPidsMax applies when Limits.PidsMax is zero.
const DefaultPidsMax = 512

// DefaultCommandTimeout applies when neither the request nor the config sets one.
const DefaultCommandTimeout = 10 * time.Minute

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Rung makes docker sandboxes. Its client is made on first use from the
// environment (DOCKER_HOST etc.) with API version negotiation.
type Rung struct {
	// Helper is the engine binary bound into allowlist containers as the
	// proxy forwarder (default: reexec.Self()).
	Helper string

	opts []client.Opt

	once sync.Once
	cli  *client.Client
	err  error
}

// New returns the docker rung; opts replace the default client options
// (client.FromEnv, client.WithAPIVersionNegotiation()).
func New(opts ...client.Opt) *Rung {
	if len(opts) == 0 {
		opts = []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	}
	return &Rung{opts: opts}
}

func (*Rung) Name() string             { return Name }
func (*Rung) Isolation() sandbox.Level { return sandbox.LevelContainer }

// Client returns the rung's Docker client.
func (r *Rung) Client() (*client.Client, error) {
	r.once.Do(func() {
		r.cli, r.err = client.NewClientWithOpts(r.opts...)
		if r.err != nil {
			r.err = fmt.Errorf("making docker client: %w", r.err)
		}
	})
	return r.cli, r.err
}

// Probe pings the daemon.
func (r *Rung) Probe(ctx context.Context) sandbox.Probe {
	p := sandbox.Probe{Rung: Name, Isolation: sandbox.LevelContainer}
	cli, err := r.Client()
	if err != nil {
		p.Reason = err.Error()
		return p
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ping, err := cli.Ping(ctx)
	if err != nil {
		p.Reason = fmt.Sprintf("docker daemon at %s unreachable: %v", cli.DaemonHost(), err)
		return p
	}
	p.Works = true
	p.Reason = fmt.Sprintf("docker daemon API %s at %s", ping.APIVersion, cli.DaemonHost())
	return p
}

// Create makes and starts the container.
func (r *Rung) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Sandbox, error) {
	cli, err := r.Client()
	if err != nil {
		return nil, err
	}
	if cfg.Workdir == "" || !path.IsAbs(cfg.Workdir) || path.Clean(cfg.Workdir) == "/" {
		return nil, fmt.Errorf("creating docker sandbox: workdir %q must be an absolute path below /", cfg.Workdir)
	}
	cfg.Workdir = path.Clean(cfg.Workdir)
	switch cfg.Policy.Network {
	case "":
		cfg.Policy.Network = sandbox.NetworkDeny
	case sandbox.NetworkDeny, sandbox.NetworkAllow, sandbox.NetworkAllowlist:
	default:
		return nil, fmt.Errorf("creating docker sandbox: unknown network mode %q (deny, allowlist or allow)", cfg.Policy.Network)
	}

	img, hostSys, err := r.image(ctx, cli, cfg)
	if err != nil {
		return nil, fmt.Errorf("creating docker sandbox: %w", err)
	}

	var eg *egress
	if cfg.Policy.Network == sandbox.NetworkAllowlist {
		if eg, err = r.setupEgress(cfg, hostSys != nil); err != nil {
			return nil, fmt.Errorf("creating docker sandbox: %w", err)
		}
	}

	env := map[string]string{"PATH": defaultPath, "HOME": cfg.Workdir}
	for k, v := range cfg.Env {
		env[k] = v
	}
	ccfg := &container.Config{
		Image:      img,
		Entrypoint: []string{},
		Cmd:        []string{"sleep", "infinity"},
		Env:        envList(env),
		WorkingDir: cfg.Workdir,
		User:       KeeperUID + ":" + KeeperUID,
		Labels:     sandboxLabels(cfg),
	}
	pids := int64(cfg.Limits.PidsMax)
	if pids <= 0 {
		pids = DefaultPidsMax
	}
	init := true
	hcfg := &container.HostConfig{
		NetworkMode:    "none",
		Init:           &init,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: cfg.ReadOnlyRoot,
		Resources:      container.Resources{PidsLimit: &pids},
	}
	if cfg.Policy.Network == sandbox.NetworkAllow {
		hcfg.NetworkMode = "bridge"
	}
	if mb := cfg.Limits.MemoryMB; mb > 0 {
		hcfg.Memory = int64(mb) << 20
		hcfg.MemorySwap = hcfg.Memory
	}
	if mb := cfg.Limits.FileSizeMB; mb > 0 {
		n := int64(mb) << 20
		hcfg.Ulimits = []*container.Ulimit{{Name: "fsize", Soft: n, Hard: n}}
	}
	if cpus := cfg.Limits.CPUs; cpus > 0 {
		hcfg.NanoCPUs = int64(cpus * 1e9)
	}
	for _, d := range hostSys {
		hcfg.Mounts = append(hcfg.Mounts, mount.Mount{Type: mount.TypeBind, Source: d, Target: d, ReadOnly: true})
	}
	if cfg.ReadOnlyRoot {
		// Anonymous volumes: writable, filled from the image, removed with
		// the container, and reachable by the archive API (tmpfs is not).
		for _, t := range []string{cfg.Workdir, "/tmp"} {
			hcfg.Mounts = append(hcfg.Mounts, mount.Mount{Type: mount.TypeVolume, Target: t})
		}
	}
	if eg != nil {
		eg.apply(ccfg, hcfg, env, cfg.Policy.AllowHosts)
		ccfg.Env = envList(env)
	}
	created, err := cli.ContainerCreate(ctx, ccfg, hcfg, nil, nil, "")
	if err != nil {
		eg.close()
		return nil, fmt.Errorf("creating docker container from %s: %w", img, err)
	}
	s := &Sandbox{cli: cli, id: created.ID, cfg: cfg, image: img, pids: pids, hostSys: hostSys != nil, binds: hostSys, egress: eg}
	if s.imageUser, err = imageUser(ctx, cli, img); err != nil {
		s.Close(ctx)
		return nil, fmt.Errorf("creating docker sandbox: %w", err)
	}
	s.user = cfg.User
	if s.user == "" {
		s.user = s.imageUser
	}
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		s.Close(ctx)
		return nil, fmt.Errorf("starting docker container %s: %w", short(created.ID), err)
	}
	// The sweep spares init (pid 1) and its sleep, the only process then.
	out, code, err := s.run(ctx, []string{"/bin/sh", "-c", "read c < /proc/1/task/1/children; echo $c"})
	if err != nil || code != 0 {
		s.Close(ctx)
		return nil, fmt.Errorf("docker sandbox %s: finding the keeper process (the image needs /bin/sh): exit %d: %v %s", short(created.ID), code, err, out)
	}
	keep, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		s.Close(ctx)
		return nil, fmt.Errorf("docker sandbox %s: keeper process: %q", short(created.ID), out)
	}
	s.keep = keep
	if cfg.User != "" {
		// Docker resolves the user at each exec: check it once here.
		if out, code, err := s.runAs(ctx, s.user, []string{"/bin/sh", "-c", "true"}); err != nil || code != 0 {
			s.Close(ctx)
			return nil, fmt.Errorf("docker sandbox %s: user %q cannot run commands: exit %d: %v %s", short(created.ID), cfg.User, code, err, strings.TrimSpace(out))
		}
	}
	if eg != nil {
		if err := s.waitForwarder(ctx); err != nil {
			s.Close(ctx)
			return nil, fmt.Errorf("docker sandbox %s: %w", short(created.ID), err)
		}
	}
	if cfg.ReadOnlyRoot || hostSys != nil {
		// The workdir must exist; a writable root gets it from WorkingDir.
		s.run(ctx, []string{"/bin/sh", "-c", `mkdir -p "$0"`, cfg.Workdir})
	}
	return s, nil
}

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Sandbox is one docker container.
type Sandbox struct {
	cli     *client.Client
	id      string
	cfg     sandbox.Config
	image   string
	pids    int64
	hostSys bool
	binds   []string
	keep    int
	// user runs the commands; imageUser is the image's own ("0" if none),
	// restored in snapshots since the container runs as KeeperUID.
	user, imageUser string
	egress          *egress

	mu     sync.Mutex
	closed bool
}

var _ sandbox.Snapshotter = (*Sandbox)(nil)

// ContainerID is the container's ID.
func (s *Sandbox) ContainerID() string { return s.id }

// Image is the image the container was created from, and HostBinds the
// host directories bound read-only into it (no image given): together what
// a plain `docker run` of the same environment needs (bench/sandbox).
func (s *Sandbox) Image() string { return s.image }

// HostBinds: see Image.
func (s *Sandbox) HostBinds() []string { return append([]string(nil), s.binds...) }

// Report describes the isolation that applies.
func (s *Sandbox) Report() sandbox.Report {
	rep := sandbox.Report{Rung: Name, Isolation: sandbox.LevelContainer, Network: s.cfg.Policy.Network, ProxyAddr: s.cfg.Policy.ProxyAddr}
	if mb := s.cfg.Limits.MemoryMB; mb > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("memory %d MiB (no swap)", mb))
	}
	rep.Limits = append(rep.Limits, fmt.Sprintf("pids %d", s.pids))
	if c := s.cfg.Limits.CPUs; c > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("cpus %g", c))
	}
	rep.Limits = append(rep.Limits, "capabilities: none", "no-new-privileges")
	rep.Notes = append(rep.Notes, fmt.Sprintf("commands run as user %q; init and the keeper process as uid %s, out of their reach", s.user, KeeperUID))
	if s.cfg.ReadOnlyRoot {
		rep.Limits = append(rep.Limits, "read-only root")
	}
	if mb := s.cfg.Limits.FileSizeMB; mb > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("rlimit FSIZE %d MiB", mb))
	}
	net := "network none"
	if s.cfg.Policy.Network == sandbox.NetworkAllow {
		net = "default bridge network"
	}
	rep.Notes = append(rep.Notes, net, "container "+short(s.id)+" from image "+short(s.image))
	if s.egress != nil {
		rep.Notes = append(rep.Notes, "allowlist: HTTP(S)_PROXY=http://"+bridge.Listen+", a forwarder in the container relaying to the egress proxy's socket; nothing else leaves the container")
	}
	if s.hostSys {
		rep.Notes = append(rep.Notes, "host /usr, /etc, /lib* bound read-only")
	}
	return rep
}

// Close force-removes the container and its volumes; idempotent.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	err := s.cli.ContainerRemove(ctx, s.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !client.IsErrNotFound(err) {
		return fmt.Errorf("removing docker container %s: %w", short(s.id), err)
	}
	s.closed = true
	if err := s.egress.close(); err != nil {
		return fmt.Errorf("removing docker sandbox %s proxy socket: %w", short(s.id), err)
	}
	return nil
}

func (s *Sandbox) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("docker sandbox is closed")
	}
	return nil
}

func (s *Sandbox) abs(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(s.cfg.Workdir, p)
	}
	return path.Clean(p)
}

// Snapshot commits the container: the image ID is the layer. With a
// read-only root the workdir (a volume, which commit skips) is copied into
// a second commit.
func (s *Sandbox) Snapshot(ctx context.Context) (sandbox.Layer, error) {
	if err := s.usable(); err != nil {
		return sandbox.Layer{}, err
	}
	// The container runs as the keeper; the image keeps its own user. An
	// allowlist container's proxy variables would point sandboxes restored
	// without a forwarder at nothing: they are emptied.
	changes := []string{"USER " + s.imageUser}
	if s.egress != nil {
		var kv []string
		for k := range bridge.ProxyEnv(nil) {
			kv = append(kv, k+"=")
		}
		sort.Strings(kv)
		changes = append(changes, "ENV "+strings.Join(kv, " "))
	}
	resp, err := s.cli.ContainerCommit(ctx, s.id, container.CommitOptions{Pause: true, Comment: "evalsi snapshot", Changes: changes})
	if err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshotting docker container %s: %w", short(s.id), err)
	}
	if !s.cfg.ReadOnlyRoot {
		return sandbox.Layer{Ref: resp.ID}, nil
	}
	rc, _, err := s.cli.CopyFromContainer(ctx, s.id, s.cfg.Workdir)
	if err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshotting docker container %s: copying workdir: %w", short(s.id), err)
	}
	defer rc.Close()
	img, err := commitWith(ctx, s.cli, resp.ID, path.Dir(s.cfg.Workdir), rc)
	if err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshotting docker container %s: %w", short(s.id), err)
	}
	return sandbox.Layer{Ref: img}, nil
}

// imageUser is the user an image's config names, "0" when none.
func imageUser(ctx context.Context, cli *client.Client, img string) (string, error) {
	in, err := cli.ImageInspect(ctx, img)
	if err != nil {
		return "", fmt.Errorf("inspecting image %s: %w", short(img), err)
	}
	if in.Config != nil && in.Config.User != "" {
		return in.Config.User, nil
	}
	return "0", nil
}

// commitWith copies a tar into dir of a temporary container made from
// image, commits it and returns the new image's ID.
func commitWith(ctx context.Context, cli *client.Client, image, dir string, tarStream io.Reader) (string, error) {
	tmp, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"true"}, Entrypoint: []string{}}, nil, nil, nil, "")
	if err != nil {
		return "", fmt.Errorf("creating temporary container from %s: %w", short(image), err)
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), tmp.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err := cli.CopyToContainer(ctx, tmp.ID, dir, tarStream, container.CopyToContainerOptions{AllowOverwriteDirWithFile: true}); err != nil {
		return "", fmt.Errorf("copying into temporary container: %w", err)
	}
	resp, err := cli.ContainerCommit(ctx, tmp.ID, container.CommitOptions{Comment: "evalsi layer"})
	if err != nil {
		return "", fmt.Errorf("committing temporary container: %w", err)
	}
	return resp.ID, nil
}

// RemoveLayer deletes a snapshot image made by Snapshot.
func (r *Rung) RemoveLayer(ctx context.Context, l sandbox.Layer) error {
	if l.Ref == "" {
		return nil
	}
	cli, err := r.Client()
	if err != nil {
		return err
	}
	if _, err := cli.ImageRemove(ctx, l.Ref, imageRemoveOptions()); err != nil && !client.IsErrNotFound(err) {
		return fmt.Errorf("removing snapshot image %s: %w", short(l.Ref), err)
	}
	return nil
}
