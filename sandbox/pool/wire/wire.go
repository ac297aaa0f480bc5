// Package wire is the sandbox pool's protocol: the JSON bodies the pool
// (package sandbox/pool) serves and its client (package sandbox/remote)
// sends, over HTTPS with mutual TLS. Nothing here names a path on either
// machine: images travel as a reference and digest, snapshots, proxies,
// sandboxes and services as ids the pool handed to the same client.
package wire

import (
	"time"

	"evals.si/egress"
	"evals.si/sandbox"
)

// Paths of the API (all under mutual TLS). {id} is an id the pool gave
// the calling client.
const (
	PathHello     = "/v1/pool"                 // GET → Hello
	PathImages    = "/v1/images/resolve"       // POST ImageRequest → Image
	PathKeepalive = "/v1/keepalive"            // POST Keepalive → KeepaliveResult
	PathSandboxes = "/v1/sandboxes"            // POST CreateRequest → Created; /{id}/…
	PathSnapshots = "/v1/snapshots"            // DELETE /{id}
	PathProxies   = "/v1/proxies"              // POST ProxyRequest → Created; /{id}/events, /{id}/policy, DELETE /{id}
	ContentNDJSON = "application/x-ndjson"     // Exec and proxy events stream
	ContentBytes  = "application/octet-stream" // file bodies
	ProxyPrefix   = "pool:"                    // a pool proxy's address, as sandbox.Policy.ProxyAddr names it
)

// Hello is the pool's answer to GET /v1/pool: what it runs and what it
// can do. Clients offer exactly these capabilities, never guessing.
type Hello struct {
	Rung      string        `json:"rung"`
	Isolation sandbox.Level `json:"isolation"`
	// Identity is the calling client as the pool knows it (its
	// certificate's subject CN and serial, and a digest of the key of the
	// CA that issued it): every object it makes is its.
	Identity     string       `json:"identity"`
	Capabilities Capabilities `json:"capabilities"`
}

// Capabilities are what the pool's sandboxes support.
type Capabilities struct {
	// Snapshot: sandboxes can snapshot (sandbox.Snapshotter).
	Snapshot bool `json:"snapshot"`
	// NetworkModes are the sandbox.Network* modes sandboxes accept.
	NetworkModes []string `json:"network_modes"`
	// Limits are the sandbox.Limits fields enforced (memory_mb, …).
	Limits []string `json:"limits"`
	// Service: StartService works.
	Service bool `json:"service"`
	// SetPolicy: a sandbox's network can widen mid-trial.
	SetPolicy bool `json:"set_policy"`
	// MaxFileBytes caps one file read or written.
	MaxFileBytes int64 `json:"max_file_bytes"`
	// LeaseTTL is how long an object lives without a keepalive.
	LeaseTTL time.Duration `json:"lease_ttl"`
	// MaxLimits are the most a sandbox of this pool may ask of each limit
	// (the operator's, `evalsid sandboxd --max-…`); nil: the pool bounds
	// none. A request over one is refused; a limit left zero gets the
	// pool's default for it, which is at most the maximum, so a client
	// never runs with less bound than these.
	MaxLimits *LimitValues `json:"max_limits,omitempty"`
}

// LimitValues are one value per sandbox limit a pool bounds; a zero field
// bounds nothing. CommandTimeout bounds every command, whatever timeout
// its exec asks for.
type LimitValues struct {
	MemoryMB       int           `json:"memory_mb,omitempty"`
	PidsMax        int           `json:"pids_max,omitempty"`
	CPUs           float64       `json:"cpus,omitempty"`
	DiskMB         int           `json:"disk_mb,omitempty"`
	FileSizeMB     int           `json:"file_size_mb,omitempty"`
	CommandTimeout time.Duration `json:"command_timeout,omitempty"`
}

// IsZero says no field is set.
func (l LimitValues) IsZero() bool { return l == LimitValues{} }

// Error is every non-2xx body.
type Error struct {
	Error string `json:"error"`
	// Code is "unsupported" for an operation the pool's rung lacks
	// (errors.ErrUnsupported on the client), "busy" for a request refused
	// because the client has too many in flight (429), else empty.
	Code string `json:"code,omitempty"`
}

// Error codes.
const (
	// CodeUnsupported marks errors.ErrUnsupported.
	CodeUnsupported = "unsupported"
	// CodeBusy marks a 429: the client has as many requests in flight as
	// the pool serves one client at once. Nothing was done; the same
	// request may be sent again once one of the others has finished.
	CodeBusy = "busy"
)

// ImageRequest resolves an image in the pool's own store.
type ImageRequest struct {
	Ref string `json:"ref"`
	// Verified asks for ResolveVerified with Keys: PEM public keys as
	// text (the pool reads no key file).
	Verified   bool     `json:"verified,omitempty"`
	Keys       []string `json:"keys,omitempty"`
	AllowLocal bool     `json:"allow_local,omitempty"`
}

// Image is a resolved image's config, without its root (which is the
// pool's).
type Image struct {
	Ref        string   `json:"ref"`
	Source     string   `json:"source,omitempty"`
	Digest     string   `json:"digest,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// CreateRequest makes a sandbox: sandbox.Config without anything
// location-dependent.
type CreateRequest struct {
	Image       string `json:"image,omitempty"`
	ImageDigest string `json:"image_digest,omitempty"`
	// Run is sandbox.Config.Run: a run id the pool's rung may label its
	// sandboxes with (the pod rung: evals.si/run).
	Run string `json:"run,omitempty"`
	// Snapshots are snapshot ids of this client's, topmost first.
	Snapshots      []string          `json:"snapshots,omitempty"`
	Workdir        string            `json:"workdir"`
	Env            map[string]string `json:"env,omitempty"`
	User           string            `json:"user,omitempty"`
	ReadOnlyRoot   bool              `json:"read_only_root,omitempty"`
	Policy         Policy            `json:"policy"`
	Limits         Limits            `json:"limits"`
	CommandTimeout time.Duration     `json:"command_timeout,omitempty"`
}

// Policy is sandbox.Policy with the proxy named by its pool id.
type Policy struct {
	Network    string   `json:"network"`
	AllowHosts []string `json:"allow_hosts,omitempty"`
	Proxy      string   `json:"proxy,omitempty"`
}

// Limits are sandbox.Limits; Cgroup is only "", "auto" or "off" (a
// directory would be a path on the pool's machine).
type Limits struct {
	MemoryMB   int     `json:"memory_mb,omitempty"`
	PidsMax    int     `json:"pids_max,omitempty"`
	FileSizeMB int     `json:"file_size_mb,omitempty"`
	CPUs       float64 `json:"cpus,omitempty"`
	Cgroup     string  `json:"cgroup,omitempty"`
	DiskMB     int     `json:"disk_mb,omitempty"`
}

// Created names a new object (sandbox, snapshot, proxy, service).
type Created struct {
	ID string `json:"id"`
	// Report is a new sandbox's isolation report (or its report after
	// SetPolicy), with proxies named by pool id.
	Report *sandbox.Report `json:"report,omitempty"`
}

// ExecFrame is one line of an exec's NDJSON stream: output chunks, then
// one frame with Result (its Stdout/Stderr empty: they came as chunks) or
// Error.
type ExecFrame struct {
	Stdout []byte              `json:"stdout,omitempty"`
	Stderr []byte              `json:"stderr,omitempty"`
	Result *sandbox.ExecResult `json:"result,omitempty"`
	Error  string              `json:"error,omitempty"`
}

// ServiceState is a service's state (GET …/services/{sid}).
type ServiceState struct {
	Exited bool   `json:"exited"`
	Code   int    `json:"code"`
	Output []byte `json:"output,omitempty"`
}

// ProxyRequest starts an egress proxy in the pool. SocketDir is the
// pool's to choose and ignored.
type ProxyRequest struct {
	Policy egress.Policy `json:"policy"`
}

// Keepalive extends the leases of the client's objects.
type Keepalive struct {
	IDs []string `json:"ids"`
}

// KeepaliveResult lists the ids the pool no longer has (expired or never
// the client's).
type KeepaliveResult struct {
	Gone []string `json:"gone,omitempty"`
}

// ProxyEvent is one line of a proxy's event stream (GET
// …/proxies/{id}/events?after=N): an event with its sequence number (from
// 1), a count of events after N the pool no longer holds (Dropped: it
// keeps the latest 10000), or, last, Closed: the proxy closed and every
// event was sent. A stream that ends without Closed broke; the client asks
// again with after set to the last Seq it has.
type ProxyEvent struct {
	Seq     int64         `json:"seq,omitempty"`
	Event   *egress.Event `json:"event,omitempty"`
	Dropped int64         `json:"dropped,omitempty"`
	Closed  bool          `json:"closed,omitempty"`
}
