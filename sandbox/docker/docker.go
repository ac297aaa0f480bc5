// Package docker is the "docker" sandbox rung (isolation level container):
// one container per sandbox through the Docker Engine API.
//
// The rung runs only on a daemon whose containers' root is an unprivileged
// uid on the host: user-namespace remapping ("userns-remap" in
// daemon.json) or rootless Docker (Probe and Create check `docker info`);
// the report's UIDMap is the daemon's remap range.
//
// The container's pid 1 is its keeper (keeper.go): a shell restarting
// `sleep infinity`, or with egress the proxy forwarder. It runs with
// --network none unless the policy is allow without an egress proxy
// (default bridge), memory and swap limited to MemoryMB, a pids limit
// (PidsMax, default 512), Docker's default capabilities (neither added nor
// dropped: what `docker build` RUN steps get), no-new-privileges, Docker's
// default seccomp profile with btrfs subvolume creation refused
// (seccomp.go), sandbox.MaskedPaths and ReadOnlyPaths, and with
// ReadOnlyRoot a read-only root whose workdir and /tmp are anonymous
// volumes. It is force-removed, with its volumes, at Close.
//
// disk_mb bounds the writable layer with the storage driver's quota
// (disk.go): overlay2 on xfs with pquota, or btrfs with quotas enabled
// (what .ci/setup configures); any other daemon fails Create with what to
// configure. A layer full after a command is a "disk" denial.
//
// Refusals of Docker's seccomp profile (mount, ptrace of others, unshare,
// ...) and connects refused under --network none leave no trace: the
// daemon this rung is tested on (20.10) drops a profile's listenerPath, so
// seccomp user notification is not available to it.
//
// Images: a snapshot layer (Layer.Ref, an image ID) is used as is; else
// Config.Image when the daemon already holds it; else Config.Root is
// imported (docker import of a tar of the root) and cached under a tag
// derived from a key over the root's file list (path, mode, size, mtime);
// with neither, an almost empty image gets the host's /usr, /etc and
// /lib* bound read-only (/bin, /lib and /lib64 follow the host's symlinks;
// /sbin is an empty directory and /usr/sbin is on PATH). Directory layers
// are copied over the image in a temporary container and committed
// (overlay whiteouts in them are not applied). A userns-remap daemon keeps
// images per remapped root: images loaded before remapping was turned on
// are not seen.
//
// Exec uses the exec API. The API cannot kill an exec, so when a command
// ends or times out a second exec, as root, SIGKILLs every process in the
// container except pid 1 and the services' (StartService, service.go):
// this kills what the command left running and, on timeout, the command
// itself. Both need /bin/sh in the image. Commands run as
// ExecRequest.User, else Config.User, else the image's user, else root;
// Docker resolves the user in the container's own /etc/passwd and
// /etc/group at each exec (supplementary groups, and HOME unless the
// environment sets one), and a user it cannot run as is an error from
// Exec. An exec that dies by SIGKILL under a memory limit when docker
// reports OOMKilled (or without any other SIGKILL source) is reported as
// an "oom" denial.
//
// /etc/hosts, /etc/hostname and /etc/resolv.conf are Docker's, written
// per container over the image's (and not in a snapshot). The hostname is
// 12 random hex digits; under --network none, where Docker's hosts file
// has no line for it, it is added as 127.0.1.1.
//
// Network allowlist, and allow with an egress proxy (the engine gives one:
// Docker's bridge reaches every host address but 127.0.0.1), keep
// --network none: a host-side relay socket to the egress proxy
// (sandbox/bridge.Relay, connectable by any uid) and the engine binary are
// bound into the container, and the binary, re-executed as the forwarder,
// is pid 1: it listens on 127.0.0.1:3128 and relays to the socket;
// HTTP(S)_PROXY points at it. The engine binary must be static
// (CGO_ENABLED=0) unless the image has its loader, and the daemon must
// share the engine's filesystem (bind mounts).
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
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

// DefaultPidsMax applies when Limits.PidsMax is zero.
const DefaultPidsMax = 512

// DefaultCommandTimeout applies when neither the request nor the config sets one.
const DefaultCommandTimeout = 10 * time.Minute

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Rung makes docker sandboxes. Its client is made on first use from the
// environment (DOCKER_HOST etc.) with API version negotiation.
type Rung struct {
	// Helper is the engine binary bound into every container at
	// /.evalsi/evalsi, read-only: the proxy forwarder with egress, and the
	// wrapper that makes each service a child subreaper (default:
	// reexec.Self()).
	Helper string

	opts []client.Opt

	once sync.Once
	cli  *client.Client
	err  error

	// daemon is what the daemon is, once it has been checked.
	mu     sync.Mutex
	daemon *daemonFacts
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
	d, err := r.checkDaemon(ctx, cli)
	if err != nil {
		p.Reason = err.Error()
		return p
	}
	p.Works = true
	p.Reason = fmt.Sprintf("docker daemon API %s at %s; uid map %s; storage driver %s", ping.APIVersion, cli.DaemonHost(), strings.Join(d.uidMap, "; "), d.driver)
	return p
}

// checkDaemon returns what the daemon is (its id mapping, storage driver),
// or why the rung refuses it; a good answer is kept (a daemon's remapping
// and storage are fixed while it runs).
func (r *Rung) checkDaemon(ctx context.Context, cli *client.Client) (*daemonFacts, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.daemon != nil {
		return r.daemon, nil
	}
	d, err := daemonInfo(ctx, cli)
	if err != nil {
		return nil, err
	}
	r.daemon = d
	return d, nil
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
	daemon, err := r.checkDaemon(ctx, cli)
	if err != nil {
		return nil, fmt.Errorf("creating docker sandbox: %w", err)
	}
	switch cfg.Policy.Network {
	case "":
		cfg.Policy.Network = sandbox.NetworkDeny
	case sandbox.NetworkDeny, sandbox.NetworkAllow, sandbox.NetworkAllowlist:
	default:
		return nil, fmt.Errorf("creating docker sandbox: unknown network mode %q (deny, allowlist or allow)", cfg.Policy.Network)
	}

	profile, err := seccompProfile()
	if err != nil {
		return nil, fmt.Errorf("creating docker sandbox: %w", err)
	}

	img, hostSys, err := r.image(ctx, cli, cfg)
	if err != nil {
		return nil, fmt.Errorf("creating docker sandbox: %w", err)
	}

	var eg *egress
	if usesProxy(cfg.Policy) {
		if eg, err = r.setupEgress(cfg, hostSys != nil); err != nil {
			return nil, fmt.Errorf("creating docker sandbox: %w", err)
		}
	}

	// No HOME unless the config sets one: as under Docker, each exec then
	// gets its user's home from the container's /etc/passwd ("/" for a uid
	// without an entry). The host's system directories have no homes in
	// them, so there HOME stays the workdir.
	env := map[string]string{"PATH": defaultPath}
	if hostSys != nil {
		env["HOME"] = cfg.Workdir
	}
	for k, v := range cfg.Env {
		env[k] = v
	}
	hostname, err := sandbox.NewHostname()
	if err != nil {
		eg.close()
		return nil, fmt.Errorf("creating docker sandbox: %w", err)
	}
	ccfg := &container.Config{
		Image:      img,
		Entrypoint: []string{},
		Cmd:        []string{"/bin/sh", "-c", keeperScript},
		Env:        envList(env),
		WorkingDir: cfg.Workdir,
		Hostname:   hostname,
		// Root: Docker gives an exec the container user's capabilities,
		// none for a non-root one. The keeper is pid 1, out of reach of
		// signals from inside whatever its uid (keeper.go).
		User:   "0:0",
		Labels: sandboxLabels(cfg),
	}
	pids := int64(cfg.Limits.PidsMax)
	if pids <= 0 {
		pids = DefaultPidsMax
	}
	// Docker's default capabilities, neither added to nor dropped from:
	// setup steps need what `docker build` gives them (apt-get's setuid to
	// _apt, chown, useradd), and root inside is an unprivileged uid outside.
	hcfg := &container.HostConfig{
		NetworkMode: "none",
		SecurityOpt: []string{"no-new-privileges", "seccomp=" + profile},
		// Explicit, since older daemons mask fewer (/proc/interrupts).
		MaskedPaths:    sandbox.MaskedPaths,
		ReadonlyPaths:  sandbox.ReadOnlyPaths,
		ReadonlyRootfs: cfg.ReadOnlyRoot,
		Resources:      container.Resources{PidsLimit: &pids},
		// Commands can write to the keeper's stdout (/proc/1/fd/1), which
		// the daemon stores on the host outside any disk_mb bound: capped.
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
	}
	if cfg.Policy.Network == sandbox.NetworkAllow && eg == nil {
		hcfg.NetworkMode = "bridge"
	} else {
		// Docker writes /etc/hosts, /etc/hostname and /etc/resolv.conf
		// over the image's in every mode, but under --network none its
		// hosts file has no line for the hostname (on a bridge it is the
		// container's address): the hostname resolves to 127.0.1.1, on
		// loopback, the only interface there is.
		hcfg.ExtraHosts = []string{hostname + ":" + hostnameAddr}
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
	if mb := cfg.Limits.DiskMB; mb > 0 {
		if err := daemon.diskOptions(mb, cfg.ReadOnlyRoot, hcfg); err != nil {
			eg.close()
			return nil, fmt.Errorf("creating docker sandbox: %w", err)
		}
	}
	helper, err := r.helper()
	if err != nil {
		eg.close()
		return nil, fmt.Errorf("creating docker sandbox: %w", err)
	}
	hcfg.Mounts = append(hcfg.Mounts, mount.Mount{Type: mount.TypeBind, Source: helper, Target: containerHelper, ReadOnly: true})
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
		if mb := cfg.Limits.DiskMB; mb > 0 {
			err = daemon.createError(mb, err)
		}
		return nil, fmt.Errorf("creating docker container from %s: %w", img, err)
	}
	s := &Sandbox{cli: cli, id: created.ID, cfg: cfg, hostname: hostname, image: img, pids: pids, hostSys: hostSys != nil, binds: hostSys, egress: eg, uidMap: daemon.uidMap}
	if mb := cfg.Limits.DiskMB; mb > 0 {
		if s.disk, err = daemon.boundDisk(ctx, cli, created.ID, mb); err != nil {
			s.Close(ctx)
			return nil, fmt.Errorf("creating docker sandbox: %w", err)
		}
	}
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
	s.pidsEvents = pidsEventsFile(created.ID)
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

// hostnameAddr is what the hostname resolves to under --network none.
const hostnameAddr = "127.0.1.1"

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
	cli *client.Client
	id  string
	cfg sandbox.Config
	// hostname is the container's hostname (also in its /etc/hosts).
	hostname string
	image    string
	pids     int64
	hostSys  bool
	binds    []string
	uidMap   []string
	// pidsEvents is the container's pids.events ("" when not readable).
	pidsEvents string
	// disk watches the writable layer's disk_mb bound (nil without one).
	disk diskBound
	// user runs the commands; imageUser is the image's own ("0" if none),
	// restored in snapshots since the container runs as root.
	user, imageUser string
	egress          *egress

	// execs is read-locked by each Exec and locked by StartService: while
	// a service starts, no command runs (so none can write to its output
	// before the wrapper's first line) and no sweep misses it.
	execs sync.RWMutex

	mu       sync.Mutex
	closed   bool
	services []*service
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
	if s.pidsEvents == "" {
		rep.Notes = append(rep.Notes, "the container's pids.events is not readable here (a remote daemon?): refused forks are not reported as denials")
	}
	if c := s.cfg.Limits.CPUs; c > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("cpus %g", c))
	}
	rep.Limits = append(rep.Limits, "no-new-privileges", seccompReport)
	rep.UIDMap = append([]string(nil), s.uidMap...)
	if u, _, _ := strings.Cut(s.user, ":"); u == "0" || u == "root" {
		rep.Capabilities = append([]string(nil), sandbox.ContainerCapabilities...)
	} else {
		rep.Notes = append(rep.Notes, "a non-root user holds no capabilities (Docker's default set applies to root)")
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("commands run as user %q unless a command names another; the keeper is the container's init (pid 1), which signals from inside cannot reach", s.user))
	if s.cfg.ReadOnlyRoot {
		rep.Limits = append(rep.Limits, "read-only root")
	}
	if mb := s.cfg.Limits.FileSizeMB; mb > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("rlimit FSIZE %d MiB", mb))
	}
	if s.disk != nil {
		rep.Limits = append(rep.Limits, fmt.Sprintf("disk=%dMB", s.cfg.Limits.DiskMB))
		rep.Notes = append(rep.Notes, s.disk.describe())
	}
	net := "network none"
	if s.cfg.Policy.Network == sandbox.NetworkAllow && s.egress == nil {
		net = "default bridge network (no egress proxy given): the host's 127.0.0.1 is out of reach, its other addresses are not"
	}
	rep.Notes = append(rep.Notes, net, "container "+short(s.id)+" from image "+short(s.image)+", hostname "+s.hostname)
	if s.egress != nil {
		rep.Notes = append(rep.Notes, s.cfg.Policy.Network+": HTTP(S)_PROXY=http://"+bridge.Listen+", a forwarder in the container relaying to the egress proxy's socket; nothing else leaves the container")
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
	for _, svc := range s.services {
		svc.closed()
	}
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
