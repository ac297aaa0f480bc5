package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"evals.si/image"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap"
	"evals.si/sandbox/firecracker"
	"evals.si/sandbox/landlock"
	podrung "evals.si/sandbox/pod"
	"evals.si/sandbox/pool"
	"evals.si/sandbox/pool/wire"
	"evals.si/sandbox/qemu"
	"evals.si/sandbox/remote"
	"evals.si/sandbox/vm"
)

// sandboxd is `evalsid sandboxd`: the sandbox pool workers lease their
// sandboxes from over mutual TLS.
func newSandboxdCmd(stderr io.Writer, logger *slog.Logger) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandboxd --listen ADDR --tls-cert FILE --tls-key FILE --client-ca FILE --state-dir DIR [flags]",
		Short: "Serve a sandbox pool that workers lease sandboxes from over mutual TLS",
		Long: `Serve a sandbox pool: workers lease sandboxes (on --rung: bwrap, landlock,
firecracker, qemu or pod) from it over mutual TLS, so the machines that hold
credentials never run sandboxes themselves. See docs/sandboxd.md.`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	listen := fs.String("listen", "", "serve the pool's API on this address (host:port), mutual TLS only")
	certFile := fs.String("tls-cert", "", "the pool's certificate (PEM)")
	keyFile := fs.String("tls-key", "", "the pool's private key (PEM)")
	clientCA := fs.String("client-ca", "", "the CA that signs the workers' client certificates (PEM); no other client is let in")
	stateDir := fs.String("state-dir", "", "images, sandboxes, snapshots and proxy sockets")
	rungName := fs.String("rung", sandbox.RungBwrap, "the rung the pool's sandboxes run on: bwrap, landlock, firecracker, qemu or pod")
	var vmSet sandbox.VMSettings
	fs.StringVar(&vmSet.Kernel, "vm-kernel", "", "firecracker and qemu: the guest kernel (default: /var/lib/evalsi/vmlinux, or scripts/build-vm-kernel.sh's bundle for qemu)")
	fs.StringVar(&vmSet.Guest, "vm-guest", "", "firecracker and qemu: evalsi-guest (default: next to evalsid)")
	fs.IntVar(&vmSet.WarmPool, "vm-warm-pool", 0, "firecracker and qemu: machines kept restored and serving per image or snapshot")
	fs.IntVar(&vmSet.VCPUs, "vm-vcpus", 0, "firecracker and qemu: vCPUs per VM (default 1)")
	fs.IntVar(&vmSet.MemoryMB, "vm-memory-mb", 0, "firecracker and qemu: memory per VM in MB (default 1024)")
	jailer := fs.String("vm-jailer", "", "firecracker: run each VM through this jailer (needs root and --vm-jailer-uid/--vm-jailer-gid)")
	jailUID := fs.Int("vm-jailer-uid", 0, "firecracker: the unprivileged uid the jailer runs Firecracker as")
	jailGID := fs.Int("vm-jailer-gid", 0, "firecracker: the unprivileged gid the jailer runs Firecracker as")
	var allowHosts stringList
	fs.Var(&allowHosts, "allow-host", "a host (host or host:port, *.domain wildcards) the pool's sandboxes may reach at most; repeat it (default: what each run's policy says)")
	var po podFlags
	po.register(fs)
	health := fs.String("health-listen", "", "serve GET /healthz in plain HTTP on this address (the API is never served without TLS)")
	ttl := fs.Duration("lease-ttl", pool.DefaultLeaseTTL, "how long a sandbox, snapshot or proxy outlives its client's last keepalive")
	hostRoot := fs.Bool("allow-host-root", false, "run sandboxes whose environment names no image on this machine's own root, read-only (for a pool whose root is an image meant for tasks, such as a pool pod's); off: they are refused")
	allowLocal := fs.Bool("allow-local-images", false, "let clients name images on this machine's filesystem (oci-layout:, docker-archive:, dir:)")
	var allowRegistries stringList
	fs.Var(&allowRegistries, "allow-registry", "a registry (HOST or HOST:PORT) the pool may pull images from although it is on this machine or a private network; repeat it (default: registries on the public internet only)")
	var maxl wire.LimitValues
	fs.IntVar(&maxl.MemoryMB, "max-memory-mb", 0, "the most memory (MB) a sandbox may ask for; one that asks none gets this (default: no bound)")
	fs.Float64Var(&maxl.CPUs, "max-cpus", 0, "the most CPUs a sandbox may ask for; one that asks none gets this (default: no bound)")
	fs.IntVar(&maxl.PidsMax, "max-pids", 0, "the most processes a sandbox's command may ask for; one that asks none gets this (default: no bound)")
	fs.IntVar(&maxl.DiskMB, "max-disk-mb", 0, "the most disk (MB) a sandbox's writable layer may ask for; one that asks none gets this (default: no bound)")
	fs.IntVar(&maxl.FileSizeMB, "max-file-size-mb", 0, "the largest file (MB) a sandbox may ask to write; one that asks none gets this (default: no bound)")
	fs.DurationVar(&maxl.CommandTimeout, "max-command-timeout", 0, "the longest any command may run, whatever its run asks (default: no bound); one that asks none gets the usual 10m, or this when shorter")
	maxObjects := fs.Int("max-objects", pool.DefaultMaxObjects, "the most sandboxes, snapshots and proxies one client may hold at once (on the pod rung each sandbox is a pod and a NetworkPolicy)")
	maxRequests := fs.Int("max-requests", pool.DefaultMaxRequests, "the most requests one client may have in flight at once (execs, file transfers, creates, ...); past it the pool answers 429")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if *listen == "" || *certFile == "" || *keyFile == "" || *clientCA == "" || *stateDir == "" || len(args) > 0 {
			return usageErr{errors.New("sandboxd needs --listen ADDR --tls-cert FILE --tls-key FILE --client-ca FILE --state-dir DIR")}
		}
		if *maxRequests <= 0 {
			return usageErr{fmt.Errorf("--max-requests %d: want 1 or more", *maxRequests)}
		}
		if *maxObjects < 1 {
			return usageErr{fmt.Errorf("--max-objects %d: want 1 or more", *maxObjects)}
		}
		var rung sandbox.Rung
		var sweeper sandbox.Sweeper
		switch *rungName {
		case sandbox.RungBwrap:
			rung = bwrap.New(bwrap.Options{})
		case sandbox.RungLandlock:
			rung = landlock.New()
		case sandbox.RungFirecracker:
			if vmSet.Kernel == "" {
				vmSet.Kernel = "/var/lib/evalsi/vmlinux"
			}
			fc := firecracker.New(firecracker.Options{Jailer: *jailer, UID: *jailUID, GID: *jailGID})
			rung = vm.New(vm.Options{VMM: fc, RawDisks: true, Settings: vmSet, CacheDir: filepath.Join(*stateDir, "vm")})
		case sandbox.RungQEMU:
			rung = vm.New(vm.Options{VMM: qemu.New(qemu.Options{}), Settings: vmSet, CacheDir: filepath.Join(*stateDir, "vm")})
		case podrung.Name:
			r, err := po.rung(logger)
			if err != nil {
				return usageErr{err}
			}
			rung, sweeper = r, r
		default:
			return usageErr{fmt.Errorf("--rung %q: bwrap, landlock, firecracker, qemu or pod", *rungName)}
		}
		tlsCfg, err := pool.TLSConfig(*certFile, *keyFile, *clientCA)
		if err != nil {
			return usageErr{err}
		}
		// The pod rung's images are the cluster's to pull; the other rungs run
		// images from the pool's own cache.
		clusterImages := rung.Name() == podrung.Name
		var imgs pool.Images
		if !clusterImages {
			tr, err := pool.RegistryTransport(allowRegistries, logger)
			if err != nil {
				return usageErr{fmt.Errorf("--allow-registry: %w", err)}
			}
			st, err := image.Open(filepath.Join(*stateDir, "images"), logger, image.WithTransport(tr))
			if err != nil {
				return fmt.Errorf("opening the pool's image cache: %w", err)
			}
			imgs = st
		}
		lim := pool.Limits{Max: maxl}
		if rung.Name() == podrung.Name {
			// --pod-cpu, --pod-memory and --pod-disk-mb are what a sandbox gets
			// when its run asks none: under a maximum they stay that, instead
			// of the pool handing such a sandbox the maximum.
			if lim.Default, err = po.defaults(); err != nil {
				return usageErr{err}
			}
		}
		srv, err := pool.New(ctx, pool.Options{Rung: rung, Images: imgs, ClusterImages: clusterImages, Sweeper: sweeper, StateDir: filepath.Join(*stateDir, "pool"),
			LeaseTTL: *ttl, AllowLocalImages: *allowLocal, AllowHostRoot: *hostRoot, AllowRegistries: allowRegistries, AllowHosts: allowHosts, Limits: lim, MaxRequests: *maxRequests, MaxObjects: *maxObjects, Logger: logger})
		if err != nil {
			return err
		}
		defer srv.Close(context.Background())
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("sandboxd: listening on %s: %w", *listen, err)
		}
		hs := srv.HTTPServer(tlsCfg, slog.NewLogLogger(logger.Handler(), slog.LevelDebug))
		errc := make(chan error, 2)
		go func() { errc <- hs.ServeTLS(ln, "", "") }()
		if *health != "" {
			hl, err := net.Listen("tcp", *health)
			if err != nil {
				return fmt.Errorf("sandboxd: listening on %s for health: %w", *health, err)
			}
			mux := http.NewServeMux()
			mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
			hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			go func() { errc <- hsrv.Serve(hl) }()
			defer hsrv.Close()
		}
		logger.Info("sandbox pool listening", "addr", ln.Addr().String(), "rung", rung.Name(), "lease_ttl", *ttl, "max_limits", maxl, "max_requests", *maxRequests)
		select {
		case <-ctx.Done():
		case err := <-errc:
			if !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("sandboxd: serving: %w", err)
			}
		}
		// The pool first: closing its proxies ends their event streams, which
		// Shutdown would otherwise wait for.
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Close(sctx); err != nil {
			logger.Warn("closing the sandbox pool", "err", err)
		}
		hs.Shutdown(sctx)
		return nil
	}
	return cmd
}

// workerConfig is worker.yaml.
type workerConfig struct {
	Sandbox sandboxAddr `yaml:"sandbox"`
}

// sandboxAddr is where a worker leases its sandboxes (sandbox.address) and
// the files of its mutual TLS; relative files are relative to the config.
type sandboxAddr struct {
	Address string `yaml:"address"`
	CA      string `yaml:"ca"`
	Cert    string `yaml:"cert"`
	Key     string `yaml:"key"`
}

func loadWorkerConfig(path string) (workerConfig, error) {
	var c workerConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("reading the worker config: %w", err)
	}
	if err := yaml.UnmarshalWithOptions(b, &c, yaml.Strict()); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	dir := filepath.Dir(path)
	for _, p := range []*string{&c.Sandbox.CA, &c.Sandbox.Cert, &c.Sandbox.Key} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	return c, nil
}

// dialPool dials the worker's sandbox pool; nil when no address is set
// (the worker runs its sandboxes itself).
func dialPool(ctx context.Context, a sandboxAddr, logger *slog.Logger) (*remote.Pool, error) {
	if a.Address == "" {
		return nil, nil
	}
	if a.CA == "" || a.Cert == "" || a.Key == "" {
		return nil, usageErr{errors.New("sandbox.address needs sandbox.ca, sandbox.cert and sandbox.key (--sandbox-ca, --sandbox-cert, --sandbox-key): the pool takes only clients with a certificate")}
	}
	tc, err := remote.TLSConfig(a.CA, a.Cert, a.Key)
	if err != nil {
		return nil, usageErr{err}
	}
	p, err := remote.Dial(ctx, remote.Options{Address: a.Address, TLS: tc, Logger: logger})
	if err != nil {
		return nil, err
	}
	h := p.Hello()
	args := []any{"pool", a.Address, "rung", h.Rung, "isolation", h.Isolation, "identity", h.Identity}
	if m := h.Capabilities.MaxLimits; m != nil {
		// What the pool bounds every run's sandboxes by, whatever a spec
		// asks: a spec over one fails its trials with the pool's refusal.
		args = append(args, "max_limits", *m)
	}
	logger.Info("leasing sandboxes from a sandbox pool", args...)
	return p, nil
}

// defaults are the pod flags' resources as a pool's defaults. The flags
// were checked by rung already.
func (p *podFlags) defaults() (wire.LimitValues, error) {
	var d wire.LimitValues
	if p.cpu != "" {
		q, err := resource.ParseQuantity(p.cpu)
		if err != nil {
			return d, fmt.Errorf("--pod-cpu %q: %w", p.cpu, err)
		}
		d.CPUs = q.AsApproximateFloat64()
	}
	if p.memory != "" {
		q, err := resource.ParseQuantity(p.memory)
		if err != nil {
			return d, fmt.Errorf("--pod-memory %q: %w", p.memory, err)
		}
		d.MemoryMB = int(q.Value() >> 20)
	}
	d.DiskMB = p.diskMB
	return d, nil
}
