package server

import (
	"fmt"
	"os"
	"path/filepath"

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
//	projects: …  tokens: …  authorization: …  credentials: …  agents: …   (package access)
type Config struct {
	Listen      string       `json:"listen,omitempty"`
	Store       StoreConfig  `json:"store"`
	BlobsDir    string       `json:"blobs_dir,omitempty"`
	DatasetsDir string       `json:"datasets_dir,omitempty"`
	Leases      LeasesConfig `json:"leases,omitzero"`
	Viewer      *bool        `json:"viewer,omitempty"`
	access.Config
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
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.Leases.TTL < 0 || c.Leases.Sweep < 0 || c.Leases.MaxTTL < 0 {
		return nil, fmt.Errorf("%s: leases durations must be positive", path)
	}
	return &c, nil
}

// ViewerOn reports whether the viewer is served (default yes).
func (c *Config) ViewerOn() bool { return c.Viewer == nil || *c.Viewer }
