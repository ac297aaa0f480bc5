// Package sandbox defines the Sandbox every rung implements, the policy and
// limits it enforces, the isolation levels and report, and the ladder that
// picks the strongest working rung. Rungs live in sandbox/<rung>.
//
// Methods take and return plain data so the same interface can later be
// served across the wire by a sandbox pool.
package sandbox

import (
	"context"
	"io/fs"
	"time"
)

// Sandbox is one isolated environment. Scoring code never knows which rung it
// runs on.
type Sandbox interface {
	// Exec runs argv inside the sandbox and waits for it. Processes it leaves
	// running are killed when it ends. A non-zero exit, a timeout or an OOM
	// kill is a result, not an error; errors mean the sandbox itself failed.
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
	// ReadFile reads a file; relative paths are relative to the workdir.
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// WriteFile writes a file, creating parent directories; relative paths
	// are relative to the workdir.
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
	// StartService starts req as the sandbox's long-running process (a
	// task image's ENTRYPOINT/CMD), as a container's main process runs:
	// unlike Exec's commands, neither it nor what it starts is killed when
	// an Exec returns; it runs until it exits or the sandbox closes.
	// req.Timeout, req.Stdin and req.OutputLimit do not apply (the service
	// keeps the last DefaultOutputLimit bytes of its output). A rung that
	// cannot keep a process alive between commands returns an error
	// wrapping errors.ErrUnsupported.
	StartService(ctx context.Context, req ExecRequest) (Service, error)
	// Report describes the isolation that applies.
	Report() Report
	// Close kills everything left and removes the sandbox. It is idempotent.
	Close(ctx context.Context) error
}

// Snapshotter is implemented by sandboxes whose rung can snapshot: the
// sandbox's filesystem changes become a layer new sandboxes start from.
type Snapshotter interface {
	// Snapshot freezes the changes made so far into a layer directory and
	// returns it; the sandbox should be closed afterwards.
	Snapshot(ctx context.Context) (Layer, error)
}

// Layer is a read-only filesystem layer (a directory, or a rung-specific
// reference such as an image ID).
type Layer struct {
	Dir string `json:"dir,omitempty"`
	Ref string `json:"ref,omitempty"`
}

// ExecRequest is one command.
type ExecRequest struct {
	Argv []string `json:"argv"`
	// Env is added to the sandbox's environment (NAME=value entries win over
	// the sandbox's own).
	Env map[string]string `json:"env,omitempty"`
	// Workdir defaults to the sandbox's workdir.
	Workdir string `json:"workdir,omitempty"`
	// User runs the command as this user of the sandbox: "name", "uid",
	// "name:group" or "uid:gid", resolved in the sandbox's own /etc/passwd
	// and /etc/group as docker exec -u resolves it (the primary group from
	// passwd, supplementary groups from /etc/group, HOME from passwd when
	// Env sets none). Empty is the sandbox's user (Config.User, else
	// root). A user the sandbox cannot run as is an error, never a command
	// run as someone else.
	User  string `json:"user,omitempty"`
	Stdin []byte `json:"stdin,omitempty"`
	// Timeout bounds the command (0: the sandbox's default command timeout).
	Timeout time.Duration `json:"timeout,omitempty"`
	// OutputLimit caps stdout and stderr each (0: DefaultOutputLimit).
	OutputLimit int `json:"output_limit,omitempty"`
	// Output, when set, is given the command's output while it runs, in
	// order per stream. What it is given is always a prefix of that
	// stream in the result (never past the output limit), so a rung that
	// streams less, or nothing, loses nothing: the caller takes the rest
	// from the result. It must not keep p, and is not called after Exec
	// returns. It is never sent over a wire.
	Output OutputFunc `json:"-"`
}

// OutputFunc receives a piece of a command's stdout (stderr false) or
// stderr as it is produced.
type OutputFunc func(stderr bool, p []byte)

// Service is a process StartService started.
type Service interface {
	// Exited reports whether the process has ended, and its exit code.
	Exited() (code int, exited bool)
	// Output is the tail of its stdout and stderr so far, interleaved.
	Output() []byte
}

// DefaultOutputLimit caps each of stdout and stderr of one command whose
// request sets no limit. The engine sets the run's caps.command_output_kb,
// whose default is the same.
const DefaultOutputLimit = 1 << 20

// ExecResult is how a command ended.
type ExecResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   []byte `json:"stdout,omitempty"`
	Stderr   []byte `json:"stderr,omitempty"`
	// Truncated is set when either stream was cut at the output limit.
	Truncated bool          `json:"truncated,omitempty"`
	TimedOut  bool          `json:"timed_out,omitempty"`
	Duration  time.Duration `json:"duration"`
	// Denials are the limits and policies that stopped or refused something.
	Denials []Denial `json:"denials,omitempty"`
}

// Denial is something the sandbox refused or stopped.
type Denial struct {
	// Kind: oom, memory, timeout, pids, fsize, disk, network, filesystem,
	// syscall.
	Kind   string `json:"kind"`
	Detail string `json:"detail,omitempty"`
}

// Network modes.
const (
	NetworkDeny      = "deny"
	NetworkAllowlist = "allowlist"
	NetworkAllow     = "allow"
)

// Policy is what the sandbox may reach.
type Policy struct {
	Network    string   `json:"network"`
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// ProxyAddr is the egress proxy (host:port on the host) that allowlisted
	// traffic goes through; the rung makes it reachable and sets HTTP(S)_PROXY.
	ProxyAddr string `json:"proxy_addr,omitempty"`
}

// Limits are per-command resource limits; zero means the rung's default.
type Limits struct {
	MemoryMB   int     `json:"memory_mb,omitempty"`
	PidsMax    int     `json:"pids_max,omitempty"`
	FileSizeMB int     `json:"file_size_mb,omitempty"`
	CPUs       float64 `json:"cpus,omitempty"`
	// Cgroup is auto | off | a delegated cgroup v2 directory.
	Cgroup string `json:"cgroup,omitempty"`
	// DiskMB caps the bytes the sandbox's writable layer may hold in all
	// (environment.sandbox.disk_mb); FileSizeMB caps each file.
	DiskMB int `json:"disk_mb,omitempty"`
}

// Config creates a sandbox.
type Config struct {
	// Root is the image's unpacked root filesystem; empty means the host's
	// system directories, read-only.
	Root string `json:"root,omitempty"`
	// Layers are snapshot layers over Root, topmost first.
	Layers []Layer `json:"layers,omitempty"`
	// Image is the image reference (rungs that run images natively, such as
	// docker, use it instead of Root).
	Image string `json:"image,omitempty"`
	// ImageDigest is the digest Image resolved to ("sha256:..."): what a
	// rung that resolves images itself (a sandbox pool) makes the sandbox
	// from, so it runs exactly the image the engine resolved.
	ImageDigest string            `json:"image_digest,omitempty"`
	Workdir     string            `json:"workdir"`
	Env         map[string]string `json:"env,omitempty"`
	User        string            `json:"user,omitempty"`
	// ReadOnlyRoot makes everything but the workdir and /tmp read-only.
	ReadOnlyRoot   bool          `json:"read_only_root,omitempty"`
	Policy         Policy        `json:"policy"`
	Limits         Limits        `json:"limits"`
	CommandTimeout time.Duration `json:"command_timeout,omitempty"`
	// StateDir is where the rung keeps this sandbox's writable state.
	StateDir string `json:"state_dir,omitempty"`
	// Owner names the process that made the sandbox, for rungs whose
	// sandboxes outlive it (see Sweeper); opaque to the rung.
	Owner string `json:"owner,omitempty"`
	// Run is the id of the run the sandbox is for, for rungs that label
	// what they make (the pod rung's evals.si/run, by which an EvalRun
	// owns its pods); opaque otherwise.
	Run string `json:"run,omitempty"`
}

// VMConfigurable is a rung whose machine settings an environment may give
// (the microVM rungs, from sandbox.firecracker and sandbox.qemu): its
// kernel and guest decide whether it works at all, so the ladder probes the
// rung with them.
type VMConfigurable interface {
	// WithVM is the rung with s over its own settings. The same s gives
	// the same rung, so its probe and warm pools are kept.
	WithVM(s VMSettings) Rung
}

// RungsFor is rungs with each VMConfigurable one given settings(its name)
// when that is not nil.
func RungsFor(rungs []Rung, settings func(rung string) *VMSettings) []Rung {
	out := make([]Rung, len(rungs))
	for i, r := range rungs {
		out[i] = r
		if c, ok := r.(VMConfigurable); ok {
			if s := settings(r.Name()); s != nil {
				out[i] = c.WithVM(*s)
			}
		}
	}
	return out
}

// VMSettings tune a microVM rung; zero fields keep the rung's own.
type VMSettings struct {
	Kernel   string
	Guest    string
	WarmPool int
	VCPUs    int
	MemoryMB int
}

// Sweeper is implemented by rungs whose sandboxes can outlive the process
// that made them (a Docker container keeps running when the engine is
// killed): Sweep removes the sandboxes and snapshots whose Config.Owner
// dead reports as gone. A rung that cannot be reached (no daemon) has
// nothing to sweep.
type Sweeper interface {
	Sweep(ctx context.Context, dead func(owner string) bool) (removed int, err error)
}

// Report is a trial's isolation report.
type Report struct {
	Rung      string   `json:"rung"`
	Isolation Level    `json:"isolation"`
	Network   string   `json:"network"`
	ProxyAddr string   `json:"proxy_addr,omitempty"`
	Limits    []string `json:"limits,omitempty"`
	// UIDMap says what ids inside map to outside, as
	// "inside-range -> outside-range" lines in uid_map's order (for
	// example "0-65535 -> 100000-165535"), or how the rung keeps root
	// inside from being root outside when it has no user namespace.
	UIDMap []string `json:"uid_map,omitempty"`
	// Capabilities are the capabilities commands hold inside (CAP_ names,
	// sorted); empty means none.
	Capabilities []string `json:"capabilities,omitempty"`
	Notes        []string `json:"notes,omitempty"`
}

// Rung is one way to make sandboxes.
type Rung interface {
	Name() string
	Isolation() Level
	// Probe says whether the rung works on this host, and why not.
	Probe(ctx context.Context) Probe
	Create(ctx context.Context, cfg Config) (Sandbox, error)
}

// Probe is the outcome of probing a rung.
type Probe struct {
	Rung      string `json:"rung"`
	Works     bool   `json:"works"`
	Isolation Level  `json:"isolation"`
	Reason    string `json:"reason,omitempty"`
}
