package server

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"evals.si/access"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/store/s3store"
)

// Config is server.yaml, `evalsid serve --config`'s file:
//
//	listen: 127.0.0.1:8080
//	store:
//	  postgres_env: EVALSI_DATABASE_URL   # the DSN, from this variable (it holds a password)
//	  # sqlite: /var/lib/evalsi/evalsi.db  # one server process only
//	blobs_dir: /var/lib/evalsi/blobs      # default: beside the SQLite file, else required
//	datasets_dir: /srv/evalsi/datasets
//	# or both in S3 (workers in other pods, Kubernetes):
//	# storage: {s3: {endpoint: http://s3:7070, region: us-east-1, bucket: evalsi, path_style: true,
//	#                access_key_env: EVALSI_S3_ACCESS_KEY, secret_key_env: EVALSI_S3_SECRET_KEY}}
//	# blobs_dir: s3://evalsi/blobs
//	# datasets_dir: s3://evalsi/datasets
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
	// Storage is where blobs_dir and datasets_dir may be instead of this
	// machine's files: an S3 bucket, named s3://bucket/prefix.
	Storage StorageConfig `json:"storage,omitzero"`
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

	// path is the file the config was read from, for error messages.
	path string
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

// StorageConfig is the object storage blobs_dir and datasets_dir may name.
type StorageConfig struct {
	S3 *S3Config `json:"s3,omitempty"`
}

// S3Config is an S3 server and bucket. The keys are read from the named
// variables when the server starts; they are never in the file.
type S3Config struct {
	// Endpoint is the server's URL; empty means AWS's own for Region.
	Endpoint  string `json:"endpoint,omitempty"`
	Region    string `json:"region"`
	Bucket    string `json:"bucket"`
	PathStyle bool   `json:"path_style,omitempty"`
	// AccessKeyEnv and SecretKeyEnv name the variables holding the keys.
	AccessKeyEnv string `json:"access_key_env"`
	SecretKeyEnv string `json:"secret_key_env"`
}

func isS3(loc string) bool { return strings.HasPrefix(loc, "s3:") }

// s3Location splits s3://bucket/prefix; the prefix is clean ("" or ending
// in one slash).
func s3Location(loc string) (bucket, prefix string, err error) {
	u, err := url.Parse(loc)
	if err != nil || u.Scheme != "s3" || u.Host == "" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", "", fmt.Errorf("%q is not an S3 location such as s3://bucket/prefix", loc)
	}
	prefix, err = s3store.CleanPrefix(strings.TrimPrefix(u.Path, "/"))
	if err != nil {
		return "", "", err
	}
	return u.Host, prefix, nil
}

// checkStorage checks blobs_dir and datasets_dir against storage.
func (c *Config) checkStorage() error {
	s3c := c.Storage.S3
	if s3c != nil {
		var missing []string
		for _, f := range []struct{ name, v string }{{"region", s3c.Region}, {"bucket", s3c.Bucket}, {"access_key_env", s3c.AccessKeyEnv}, {"secret_key_env", s3c.SecretKeyEnv}} {
			if f.v == "" {
				missing = append(missing, f.name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%s: storage.s3 needs %s", c.path, strings.Join(missing, ", "))
		}
		if s3c.Endpoint != "" {
			if u, err := url.Parse(s3c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
				return fmt.Errorf("%s: storage.s3.endpoint %q is not an http(s) URL such as http://s3.example:7070 (keys go in the variables access_key_env and secret_key_env name, not the URL)", c.path, s3c.Endpoint)
			}
		}
	}
	for _, f := range []struct{ name, v string }{{"blobs_dir", c.BlobsDir}, {"datasets_dir", c.DatasetsDir}} {
		if !isS3(f.v) {
			continue
		}
		if s3c == nil {
			return fmt.Errorf("%s: %s is %q, in S3, but the file has no storage.s3; add storage: {s3: {endpoint, region, bucket, access_key_env, secret_key_env}}, or make %s a directory", c.path, f.name, f.v, f.name)
		}
		bucket, _, err := s3Location(f.v)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", c.path, f.name, err)
		}
		if bucket != s3c.Bucket {
			return fmt.Errorf("%s: %s is in bucket %q, but storage.s3.bucket is %q; use s3://%s/PREFIX", c.path, f.name, bucket, s3c.Bucket, s3c.Bucket)
		}
	}
	if isS3(c.BlobsDir) && c.Store.SQLite != "" {
		return fmt.Errorf("%s: blobs_dir in S3 needs a PostgreSQL store (store.postgres_env): the SQLite store keeps its blobs beside its file", c.path)
	}
	return nil
}

// checkApart refuses a blobs_dir inside datasets_dir or holding it: every
// project may list and read datasets, and blobs hold every project's
// outputs and artifacts.
func (c *Config) checkApart() error {
	if c.DatasetsDir == "" || isS3(c.BlobsDir) != isS3(c.DatasetsDir) {
		return nil
	}
	within := func(a, b string) bool { // a is b or under it
		if isS3(a) {
			_, ap, _ := s3Location(a)
			_, bp, _ := s3Location(b)
			return strings.HasPrefix(ap, bp)
		}
		rel, err := filepath.Rel(b, a)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	if within(c.BlobsDir, c.DatasetsDir) || within(c.DatasetsDir, c.BlobsDir) {
		return fmt.Errorf("%s: blobs_dir %q and datasets_dir %q overlap; blobs hold every project's outputs and datasets are readable by every project, so keep them apart", c.path, c.BlobsDir, c.DatasetsDir)
	}
	return nil
}

// s3Client is the S3 client storage.s3 describes, with the keys read from
// its variables.
func (c *Config) s3Client(getenv func(string) string) (*s3.Client, error) {
	s3c := c.Storage.S3
	keys := map[string]string{}
	for _, f := range []struct{ field, env string }{{"access_key_env", s3c.AccessKeyEnv}, {"secret_key_env", s3c.SecretKeyEnv}} {
		v := getenv(f.env)
		if v == "" {
			return nil, fmt.Errorf("%s: storage.s3.%s names %s, which is not set; set it to the S3 key (it is never read from the file)", c.path, f.field, f.env)
		}
		keys[f.field] = v
	}
	client, err := s3store.NewClient(s3store.Config{Endpoint: s3c.Endpoint, Region: s3c.Region, PathStyle: s3c.PathStyle,
		AccessKey: keys["access_key_env"], SecretKey: keys["secret_key_env"]})
	if err != nil {
		return nil, fmt.Errorf("%s: storage.s3: %w", c.path, err)
	}
	return client, nil
}

// OpenBlobs opens blobs_dir: a directory, or a prefix of storage.s3's
// bucket. getenv reads the S3 keys' variables.
func (c *Config) OpenBlobs(ctx context.Context, getenv func(string) string) (store.Blobs, error) {
	if !isS3(c.BlobsDir) {
		b, err := store.OpenFSBlobs(c.BlobsDir)
		if err != nil {
			return nil, fmt.Errorf("opening blobs_dir: %w", err)
		}
		return b, nil
	}
	client, err := c.s3Client(getenv)
	if err != nil {
		return nil, err
	}
	bucket, prefix, _ := s3Location(c.BlobsDir)
	b, err := s3store.Open(ctx, client, s3store.Options{Bucket: bucket, Prefix: prefix})
	if err != nil {
		return nil, fmt.Errorf("opening blobs_dir: %w", err)
	}
	return b, nil
}

// OpenDatasets opens datasets_dir: a directory, read through an os.Root,
// or a prefix of storage.s3's bucket; nil when there is none.
func (c *Config) OpenDatasets(ctx context.Context, getenv func(string) string) (DatasetFiles, error) {
	switch {
	case c.DatasetsDir == "":
		return nil, nil
	case !isS3(c.DatasetsDir):
		return RootDatasets(c.DatasetsDir), nil
	}
	client, err := c.s3Client(getenv)
	if err != nil {
		return nil, err
	}
	bucket, prefix, _ := s3Location(c.DatasetsDir)
	d, err := S3Datasets(ctx, client, bucket, prefix)
	if err != nil {
		return nil, fmt.Errorf("opening datasets_dir: %w", err)
	}
	return d, nil
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
	c.path = path
	c.Store.SQLite = abs(c.Store.SQLite)
	// An s3:// location is checked against storage.s3, not made a path.
	if !isS3(c.BlobsDir) {
		c.BlobsDir = abs(c.BlobsDir)
	}
	if !isS3(c.DatasetsDir) {
		c.DatasetsDir = abs(c.DatasetsDir)
	}
	if err := c.checkStorage(); err != nil {
		return nil, err
	}
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
	if err := c.checkApart(); err != nil {
		return nil, err
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
