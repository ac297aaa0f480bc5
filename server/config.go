package server

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"evals.si/access"
	"evals.si/spec"
)

// Config is server.yaml, `evalsid serve --config`'s file:
//
//	listen: 127.0.0.1:8080
//	store:
//	  postgres_env: EVALSI_DATABASE_URL   # the DSN, from this variable (it holds a password)
//	  # sqlite: /var/lib/evalsi/evalsi.db  # one server process only
//	blobs_dir: /var/lib/evalsi/blobs      # default: beside the SQLite file, else required
//	datasets_dir: /srv/evalsi/datasets
//	leases: {ttl: 30s, sweep: 5s}
//	viewer: true
//	tls: {cert_file: server.crt, key_file: server.key}   # https; else plain http
//	trace_backends: [http://jaeger:16686]   # what dataset: {traces: {url}} may read
//	projects: …  tokens: …  authorization: …  credentials: …  agents: …   (package access)
type Config struct {
	Listen      string       `json:"listen,omitempty"`
	Store       StoreConfig  `json:"store"`
	BlobsDir    string       `json:"blobs_dir,omitempty"`
	DatasetsDir string       `json:"datasets_dir,omitempty"`
	Leases      LeasesConfig `json:"leases,omitzero"`
	Viewer      *bool        `json:"viewer,omitempty"`
	// TLS serves https with this certificate and key (PEM files); without
	// it the server speaks plain http, for loopback or a TLS proxy in front.
	TLS *TLSConfig `json:"tls,omitempty"`
	// TraceBackends are the trace backends (Jaeger query URLs, such as
	// http://jaeger:16686) a dataset: {traces: {url}} may read; none by
	// default, so a submitted spec cannot make the server fetch an address
	// of its choosing.
	TraceBackends []string `json:"trace_backends,omitempty"`
	// MaxTrialsPerRun caps records × trials of one run (default 100000).
	MaxTrialsPerRun int `json:"max_trials_per_run,omitempty"`
	// AllowLocalImages admits images from a worker's own files (dir:,
	// oci-layout:, docker-archive:), for offline fleets whose workers hold
	// the images; AllowUnsafeHost admits the host rung (no sandbox), which
	// workers must allow too (evalsid worker --allow-unsafe-host).
	AllowLocalImages bool `json:"allow_local_images,omitempty"`
	AllowUnsafeHost  bool `json:"allow_unsafe_host,omitempty"`
	access.Config
}

// TLSConfig names the server's certificate and key.
type TLSConfig struct {
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
}

// StoreConfig names the store: PostgreSQL (its DSN in a variable) or a
// SQLite file.
type StoreConfig struct {
	PostgresEnv string `json:"postgres_env,omitempty"`
	SQLite      string `json:"sqlite,omitempty"`
}

// LeasesConfig tunes leasing: TTL is a lease's length (default 30s), Sweep
// how often expired leases are requeued (default TTL/3), MaxTTL the longest
// lease a worker may ask for (default 5m).
type LeasesConfig struct {
	TTL    spec.Duration `json:"ttl,omitempty"`
	Sweep  spec.Duration `json:"sweep,omitempty"`
	MaxTTL spec.Duration `json:"max_ttl,omitempty"`
}

// LoadConfig reads and checks server.yaml. Relative directories resolve
// against the file's directory.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the server config: %w", err)
	}
	var c Config
	if err := spec.Decode(path, b, &c); err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	c.Store.SQLite, c.BlobsDir, c.DatasetsDir = abs(c.Store.SQLite), abs(c.BlobsDir), abs(c.DatasetsDir)
	if t := c.TLS; t != nil {
		if t.CertFile == "" || t.KeyFile == "" {
			return nil, fmt.Errorf("%s: tls needs cert_file and key_file", path)
		}
		t.CertFile, t.KeyFile = abs(t.CertFile), abs(t.KeyFile)
	}
	switch {
	case c.Store.PostgresEnv == "" && c.Store.SQLite == "":
		return nil, fmt.Errorf("%s: store needs postgres_env (the variable holding the PostgreSQL DSN) or sqlite (a file)", path)
	case c.Store.PostgresEnv != "" && c.Store.SQLite != "":
		return nil, fmt.Errorf("%s: store has both postgres_env and sqlite; give one", path)
	}
	if c.BlobsDir == "" {
		if c.Store.SQLite == "" {
			return nil, fmt.Errorf("%s: blobs_dir is required with a PostgreSQL store", path)
		}
		c.BlobsDir = filepath.Join(filepath.Dir(c.Store.SQLite), "blobs")
	}
	for i, b := range c.TraceBackends {
		if u, err := url.Parse(b); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s: trace_backends[%d] %q is not an http(s) URL", path, i, b)
		}
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.MaxTrialsPerRun < 0 {
		return nil, fmt.Errorf("%s: max_trials_per_run must be positive", path)
	}
	if c.MaxTrialsPerRun == 0 {
		c.MaxTrialsPerRun = 100000
	}
	if c.Leases.TTL < 0 || c.Leases.Sweep < 0 || c.Leases.MaxTTL < 0 {
		return nil, fmt.Errorf("%s: leases durations must be positive", path)
	}
	return &c, nil
}

// AllowTraceURL admits a traces URL on one of the configured backends (same
// scheme and host, path beneath the backend's).
func (c *Config) AllowTraceURL(u *url.URL) error {
	for _, b := range c.TraceBackends {
		bu, err := url.Parse(b)
		if err != nil {
			continue
		}
		if u.Scheme == bu.Scheme && u.Host == bu.Host && strings.HasPrefix(u.Path, strings.TrimRight(bu.Path, "/")) {
			return nil
		}
	}
	return fmt.Errorf("%s is not a trace backend of this server (the server config's trace_backends lists them)", u.Redacted())
}

// ViewerOn reports whether the viewer is served (default yes).
func (c *Config) ViewerOn() bool { return c.Viewer == nil || *c.Viewer }
