package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"evals.si/sandbox/execproto"
	"evals.si/sandbox/limits"
)

// subreaperArg, as argv[1], makes the guest binary (re-executed through
// /proc/self/exe, which still names it after the root switch) a child
// subreaper that execs the service: argv[2] the program, argv[3:] its argv.
const subreaperArg = "--evalsi-subreaper"

// Main is evalsi-guest's main.
func Main(args []string) int {
	if len(args) > 1 && args[1] == subreaperArg {
		return subreaper(args[2:])
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "evalsi-guest is a microVM's init (PID 1); it is not run by hand")
		return 2
	}
	g := &guest{}
	err := g.boot()
	if err != nil {
		g.fatal(err)
	}
	g.serveForever()
	return 0
}

// subreaper execs a service as a child subreaper (sweep.go).
func subreaper(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "evalsi-guest subreaper: usage: PROGRAM ARGV0 ARGS...")
		return 125
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "evalsi-guest subreaper: making the service a child subreaper:", err)
		return 125
	}
	err := unix.Exec(args[0], args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "evalsi-guest subreaper: executing %s: %v\n", args[0], err)
	return 126
}

func serviceWrapper(bin string, argv []string) (string, []string) {
	return "/proc/self/exe", append([]string{"evalsi-guest", subreaperArg, bin}, argv...)
}

type guest struct {
	console *os.File
	log     *slog.Logger
	cmdline string
	control Control
	devfd   int // the devtmpfs, for opening the control port
	cg      *cgroups
	// seccomp is the filter every command is forked under
	// (limits.SeccompNotifyFilter, as the bwrap rung's).
	seccomp []byte

	setupMu sync.Mutex
	first   *execproto.SetupMsg // the first setup, which later ones may not change but for the proxy port and limits
	proxy   net.Listener
	proxyAt int

	tunMu sync.Mutex
	tun   *execproto.Tunnel // the current session's
}

// fatal says why on the console (the host's serial log) and powers off,
// so the host sees the machine end with the reason.
func (g *guest) fatal(err error) {
	w := io.Writer(os.Stderr)
	if g.console != nil {
		w = g.console
	}
	fmt.Fprintf(w, "evalsi-guest: fatal: %v\n", err)
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {} // PID 1 must not exit (the kernel would panic)
}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mounting %s (%s) at %s: %w", src, fstype, dst, err)
	}
	return nil
}

// boot is everything before serving.
func (g *guest) boot() error {
	// Every signal a command sends PID 1 lands here and is dropped:
	// unhandled, Go's runtime would end on some, and PID 1's end is a
	// kernel panic.
	signal.Notify(make(chan os.Signal, 1))
	for _, d := range []string{"/proc", "/sys", "/dev"} {
		os.MkdirAll(d, 0o755)
	}
	if err := mount("devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"); err != nil && !errors.Is(err, unix.EBUSY) {
		return err
	}
	if c, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		g.console = c
	}
	logTo := io.Writer(os.Stderr)
	if g.console != nil {
		logTo = g.console
	}
	g.log = slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := mount("sysfs", "/sys", "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return fmt.Errorf("reading the kernel command line: %w", err)
	}
	g.cmdline = strings.TrimSpace(string(b))
	if g.control, err = ParseControl(g.cmdline); err != nil {
		return err
	}
	if g.seccomp, err = limits.SeccompNotifyFilter(); err != nil {
		return fmt.Errorf("the commands' seccomp filter: %w", err)
	}
	if err := loadModules("/modules.list", g.cmdline); err != nil {
		return err
	}
	if err := g.switchRoot(); err != nil {
		return err
	}
	// No command may load a module from here on, even one that escaped
	// its capability bounds.
	if err := os.WriteFile("/proc/sys/kernel/modules_disabled", []byte("1"), 0); err != nil {
		return fmt.Errorf("disabling module loading: %w", err)
	}
	if err := g.lockDown(); err != nil {
		return err
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	// Commands run as the guest's root: without this, one could ptrace
	// PID 1 or read its /proc/1/fd (same uid) even without
	// CAP_SYS_PTRACE.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("making the guest init non-dumpable: %w", err)
	}
	return nil
}

// loadModules loads the modules listed (paths relative to the
// initramfs root, in dependency order) with their command-line
// parameters.
func loadModules(list, cmdline string) error {
	b, err := os.ReadFile(list)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a kernel with everything built in
	}
	if err != nil {
		return fmt.Errorf("reading the module list: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		p := strings.TrimSpace(line)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		if err := loadModule("/"+strings.TrimPrefix(p, "/"), ModuleArgs(cmdline, ModuleName(p))); err != nil {
			return err
		}
	}
	return nil
}

func loadModule(p, params string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("loading module %s: %w", p, err)
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), params, 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("loading module %s (parameters %q): %w", p, params, err)
	}
	return nil
}

// waitFor polls for a path the kernel creates when a device probes.
func waitFor(p string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if _, err := os.Stat(p); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %v: %w", p, d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// switchRoot mounts /dev/vda and makes it the root, as switch_root does
// (MS_MOVE onto /, chroot), with /proc, /sys and /dev moved along. The
// initramfs stays in memory underneath: the guest binary's /proc/self/exe
// still resolves into it.
func (g *guest) switchRoot() error {
	if err := waitFor("/dev/vda", 10*time.Second); err != nil {
		return fmt.Errorf("the root disk: %w (is virtio_blk loaded and the disk attached?)", err)
	}
	const newRoot = "/newroot"
	os.MkdirAll(newRoot, 0o755)
	// nodev: a device node on the disk (an image's, or one a command
	// makes with CAP_MKNOD) opens nothing; commands get their devices
	// from the /dev commandDev makes.
	if err := mount("/dev/vda", newRoot, "ext4", unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("the root disk: %w", err)
	}
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		os.MkdirAll(newRoot+d, 0o755)
		if err := mount(d, newRoot+d, "", unix.MS_MOVE, ""); err != nil {
			return err
		}
	}
	if err := os.Chdir(newRoot); err != nil {
		return fmt.Errorf("switching root: %w", err)
	}
	if err := mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return err
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("switching root: chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return fmt.Errorf("switching root: %w", err)
	}
	return nil
}

// roBind makes p a read-only bind of itself, stacked over what is there:
// what the server holds open below stays writable.
func roBind(p string) error {
	if err := mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	if err := mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", p, err)
	}
	return nil
}

// lockDown sets up the cgroup hierarchy and leaves commands only
// read-only views of the kernel's knobs (/sys, /proc/sys, the cgroups):
// as root with CAP_DAC_OVERRIDE they could otherwise write them (the
// uevent helper and core_pattern run programs with every capability).
func (g *guest) lockDown() error {
	if err := roBind("/sys"); err != nil {
		return err
	}
	// The server's own cgroup2 mount, writable, seen through a
	// descriptor only; commands see a read-only bind of it.
	if err := mount("cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "nsdelegate"); err != nil {
		return err
	}
	root, err := unix.Open("/sys/fs/cgroup", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the cgroup hierarchy: %w", err)
	}
	if err := enableControllers(root); err != nil {
		return fmt.Errorf("the cgroup hierarchy: %w", err)
	}
	g.cg = &cgroups{root: root, log: g.log}
	if err := roBind("/sys/fs/cgroup"); err != nil {
		return err
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger"} {
		if err := roBind(p); err != nil {
			return err
		}
	}
	dev, err := unix.Open("/dev", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening /dev: %w", err)
	}
	g.devfd = dev
	if err := commandDev("/dev", dev); err != nil {
		return err
	}
	return maskProc()
}

// loopbackUp brings lo up (the only network device; the proxy listener
// and the sandbox's own servers use it).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing lo up: reading its flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	return nil
}

func (g *guest) serveOptions() execproto.ServeOptions {
	return execproto.ServeOptions{
		Setup:    g.setup,
		Restore:  g.restore,
		Confine:  g.confine,
		KeepCaps: keepCaps(),
		Service:  serviceWrapper,
		Seccomp:  g.seccomp,
		Tunnel: func(send execproto.TunnelSend) execproto.FrameHandler {
			t := execproto.NewTunnel(send, nil)
			g.tunMu.Lock()
			g.tun = t
			g.tunMu.Unlock()
			return sessionTunnel{g, t}
		},
	}
}

// sessionTunnel forgets the session's tunnel when it closes.
type sessionTunnel struct {
	g *guest
	*execproto.Tunnel
}

func (s sessionTunnel) Close() {
	s.g.tunMu.Lock()
	if s.g.tun == s.Tunnel {
		s.g.tun = nil
	}
	s.g.tunMu.Unlock()
	s.Tunnel.Close()
}

// serveForever serves one host session after another.
func (g *guest) serveForever() {
	ctx := context.Background()
	switch g.control.Kind {
	case "virtio-serial":
		name, err := FindPort("/", g.control.Name)
		if err != nil {
			g.fatal(err)
		}
		fd, err := unix.Openat(g.devfd, name, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			g.fatal(fmt.Errorf("opening the control port /dev/%s: %w", name, err))
		}
		port := os.NewFile(uintptr(fd), "/dev/"+name)
		g.log.Info("serving", "control", "virtio-serial", "port", name)
		for {
			s := &portSession{f: port}
			err := execproto.Serve(ctx, s, s, g.serveOptions())
			g.log.Info("session ended", "err", err)
		}
	case "vsock":
		fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: g.control.Port})
		}
		if err == nil {
			err = unix.Listen(fd, 1)
		}
		if err != nil {
			g.fatal(fmt.Errorf("listening on vsock port %d: %w (is vmw_vsock_virtio_transport loaded?)", g.control.Port, err))
		}
		g.log.Info("serving", "control", "vsock", "port", g.control.Port)
		for {
			c, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
			if err != nil {
				if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
					continue
				}
				g.log.Error("accepting the host's connection", "err", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			conn := os.NewFile(uintptr(c), "vsock")
			err = execproto.Serve(ctx, conn, conn, g.serveOptions())
			conn.Close()
			g.log.Info("session ended", "err", err)
		}
	}
}

// portSession is one session over the virtio-serial port. A read of 0
// means the host side is not connected: before the session has written
// anything (its FrameReady waits in the kernel until the host connects),
// the host has not come yet and the read is retried; afterwards the host
// has gone, and the session ends.
type portSession struct {
	f         *os.File
	mu        sync.Mutex
	connected bool
}

func (p *portSession) Write(b []byte) (int, error) {
	n, err := p.f.Write(b)
	if err == nil {
		p.mu.Lock()
		p.connected = true
		p.mu.Unlock()
	}
	return n, err
}

func (p *portSession) Read(b []byte) (int, error) {
	for {
		n, err := p.f.Read(b)
		if n > 0 || !errors.Is(err, io.EOF) {
			return n, err
		}
		p.mu.Lock()
		connected := p.connected
		p.mu.Unlock()
		if connected {
			return 0, io.EOF
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The proxy listener: each connection a command makes to
// 127.0.0.1:ProxyPort goes to the host through the current session's
// tunnel.
func (g *guest) setProxy(port int) error {
	if port == g.proxyAt {
		return nil
	}
	if g.proxy != nil {
		g.proxy.Close()
		g.proxy, g.proxyAt = nil, 0
	}
	if port == 0 {
		return nil
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return fmt.Errorf("the egress proxy's listener: %w", err)
	}
	g.proxy, g.proxyAt = l, port
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			g.tunMu.Lock()
			t := g.tun
			g.tunMu.Unlock()
			if t == nil {
				c.Close() // no host to carry it to
				continue
			}
			t.Open(c)
		}
	}()
	return nil
}

func (g *guest) setup(ctx context.Context, m execproto.SetupMsg) error {
	g.setupMu.Lock()
	defer g.setupMu.Unlock()
	if g.first != nil {
		if err := sameSetup(*g.first, m); err != nil {
			return err
		}
	} else {
		if err := applySetup(m); err != nil {
			return err
		}
		first := m
		g.first = &first
	}
	if err := setFileSize(m.FileSizeMB); err != nil {
		return err
	}
	g.cg.setLimits(cgLimits{memoryMB: m.MemoryMB, pidsMax: m.PidsMax, cpuMillis: m.CPUMillis})
	return g.setProxy(m.ProxyPort)
}

// confine is a command's cgroup, and after it a full disk_mb disk as a
// disk denial.
func (g *guest) confine(service bool) (execproto.Confinement, error) {
	c, err := g.cg.confine(service)
	if err != nil {
		return c, err
	}
	finish := c.Finish
	c.Finish = func() []execproto.Denial {
		ds := finish()
		g.setupMu.Lock()
		mb := 0
		if g.first != nil {
			mb = g.first.DiskMB
		}
		g.setupMu.Unlock()
		if why := diskFull(mb); why != "" {
			ds = append(ds, execproto.Denial{Kind: "disk", Syscall: -1, Detail: why})
		}
		return ds
	}
	return c, nil
}

// sameSetup refuses a later setup that changes more than the proxy port
// and the limits: the mounts are made once.
func sameSetup(a, b execproto.SetupMsg) error {
	var changed []string
	if a.Workdir != b.Workdir {
		changed = append(changed, "Workdir")
	}
	if a.ReadOnlyRoot != b.ReadOnlyRoot {
		changed = append(changed, "ReadOnlyRoot")
	}
	if a.Hostname != b.Hostname {
		changed = append(changed, "Hostname")
	}
	if a.DiskMB != b.DiskMB {
		changed = append(changed, "DiskMB")
	}
	same := len(a.Etc) == len(b.Etc)
	for i := 0; same && i < len(a.Etc); i++ {
		same = a.Etc[i].Path == b.Etc[i].Path && string(a.Etc[i].Data) == string(b.Etc[i].Data)
	}
	if !same {
		changed = append(changed, "Etc")
	}
	if len(changed) > 0 {
		return fmt.Errorf("a later setup may change only ProxyPort and the limits; it changes %s", strings.Join(changed, ", "))
	}
	return nil
}

// applySetup is the first setup: the workdir, the hostname, the /etc
// files, and a read-only root (all but the workdir and /tmp).
func applySetup(m execproto.SetupMsg) error {
	if m.Workdir == "" || !filepath.IsAbs(m.Workdir) {
		return fmt.Errorf("setup: workdir %q is not an absolute path", m.Workdir)
	}
	if m.Hostname != "" {
		if err := unix.Sethostname([]byte(m.Hostname)); err != nil {
			return fmt.Errorf("setup: setting the hostname %q: %w", m.Hostname, err)
		}
	}
	// Written while the root is still writable, so no bind mount is
	// needed under ReadOnlyRoot: the disk is this sandbox's own copy.
	for _, f := range m.Etc {
		if err := writeEtc(f); err != nil {
			return err
		}
	}
	if m.ReadOnlyRoot {
		// Memory, so under disk_mb it is capped too (by its size; the
		// root disk's reserve does not cover it).
		opts := "mode=1777"
		if m.DiskMB > 0 {
			opts += fmt.Sprintf(",size=%dm", m.DiskMB)
		}
		if err := mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	if err := os.MkdirAll(m.Workdir, 0o755); err != nil {
		return fmt.Errorf("setup: creating the workdir: %w", err)
	}
	if m.DiskMB > 0 {
		if err := reserveDisk(m.DiskMB); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	if m.ReadOnlyRoot {
		// The workdir becomes a mount of its own, which stays writable
		// when the root's mount turns read-only.
		if !strings.HasPrefix(m.Workdir+"/", "/tmp/") {
			if err := mount(m.Workdir, m.Workdir, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
		}
		// A bind remount sets the mount's flags to these: nodev stays.
		if err := mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("setup: making the root read-only: %w", err)
		}
	}
	return nil
}

// writeEtc replaces one file of the root's /etc (a symlink there, such as
// resolv.conf's to a resolver's stub file, is replaced, not followed).
func writeEtc(f execproto.EtcFile) error {
	if !filepath.IsAbs(f.Path) {
		return fmt.Errorf("setup: %q is not an absolute path", f.Path)
	}
	if st, err := os.Lstat(f.Path); err == nil && st.Mode()&os.ModeSymlink != 0 {
		os.Remove(f.Path)
	}
	os.MkdirAll(filepath.Dir(f.Path), 0o755)
	if err := os.WriteFile(f.Path, f.Data, 0o644); err != nil {
		return fmt.Errorf("setup: writing %s: %w", f.Path, err)
	}
	return nil
}

// setFileSize sets RLIMIT_FSIZE on the server, which every command
// inherits: rlimits belong to the process, not the thread, so this is
// the only way to give it to a command from its first instruction (the
// server's own writes, the host's WriteFile, get it too, as under bwrap).
func setFileSize(mb int) error {
	lim := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	if mb > 0 {
		lim.Cur, lim.Max = uint64(mb)<<20, uint64(mb)<<20
	}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		return fmt.Errorf("setup: the file size limit: %w", err)
	}
	return nil
}

// Linux's random ioctls (_IOW('R', 3, int[2]) and _IO('R', 7)).
const (
	rndAddEntropy = 0x40085203
	rndReseedCRNG = 0x5207
)

// restore follows a snapshot restore: this copy's own clock and entropy.
func (g *guest) restore(ctx context.Context, m execproto.RestoreMsg) error {
	tv := unix.NsecToTimeval(m.UnixNano)
	if err := unix.Settimeofday(&tv); err != nil {
		return fmt.Errorf("restore: setting the clock: %w", err)
	}
	if len(m.Seed) == 0 {
		return errors.New("restore: no entropy seed: restored copies would share a random stream")
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info: entropy_count (bits), buf_size (bytes), buf.
	buf := make([]byte, 8+len(m.Seed))
	*(*int32)(unsafe.Pointer(&buf[0])) = int32(8 * len(m.Seed))
	*(*int32)(unsafe.Pointer(&buf[4])) = int32(len(m.Seed))
	copy(buf[8:], m.Seed)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		return fmt.Errorf("restore: adding the seed to the entropy pool: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); e != 0 {
		return fmt.Errorf("restore: reseeding the random generator: %w", e)
	}
	return nil
}
