// Package image resolves OCI image references to unpacked, cached root
// filesystems.
//
// References are registry images (docker.io/library/python:3.13-slim,
// 127.0.0.1:5000/x:tag, NAME@sha256:HEX), oci-layout:PATH[:tag|@digest],
// docker-archive:PATH (a `docker save` tarball) and dir:PATH (a plain root
// directory used as it is).
//
// The Store keeps, under its directory (created 0700: roots may hold
// setuid files):
//
//	blobs/sha256/HEX      registry layer blobs, content-addressed and verified
//	roots/sha256-HEX/     one unpacked image: rootfs/ and image.json
//	aliases/sha256-HEX    an index digest → the platform manifest chosen from it
//	tmp/                  work in progress; roots appear by an atomic rename
//
// A root directory under roots/ exists only once complete, so a crash never
// leaves a half root that looks usable; leftovers in tmp/ are removed the
// next time the store is opened.
package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image is a resolved image.
type Image struct {
	// Ref is the reference as given to Resolve.
	Ref string `json:"ref"`
	// Source is the reference actually fetched, after mirrors were applied.
	Source string `json:"source,omitempty"`
	// Digest identifies the content: the image manifest's digest for
	// registry and oci-layout images (for an index, the manifest chosen for
	// this platform), the config digest (docker's image ID) for
	// docker-archive, and empty for dir: images, which are not
	// content-addressed (their identity is their path).
	Digest string `json:"digest,omitempty"`
	// Root is the unpacked root directory. It is shared by every user of the
	// store and read-only by convention: rungs overlay or copy it.
	Root       string   `json:"root"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// Option configures a Store.
type Option func(*options)

type options struct {
	mirrors   map[string]string
	transport http.RoundTripper
	keychain  authn.Keychain
	platform  v1.Platform
}

// WithMirrors rewrites references before they are resolved. A key is a
// reference or a prefix of one (docker.io/library/python, or
// docker.io/library/ to match everything under it); the longest matching key
// wins and its value replaces the matched part: another registry reference
// or a local oci-layout:PATH (docker.io/library/python →
// oci-layout:/mirror/python turns python:3.13 into
// oci-layout:/mirror/python:3.13).
func WithMirrors(m map[string]string) Option {
	return func(o *options) {
		o.mirrors = make(map[string]string, len(m))
		for k, v := range m {
			o.mirrors[k] = v
		}
	}
}

// WithTransport sets the HTTP transport used to reach registries (default
// remote.DefaultTransport). Plain HTTP is refused for non-loopback hosts
// whatever the transport.
func WithTransport(t http.RoundTripper) Option { return func(o *options) { o.transport = t } }

// WithKeychain sets where registry credentials come from (default
// authn.DefaultKeychain: the docker config and its credential helpers).
func WithKeychain(k authn.Keychain) Option { return func(o *options) { o.keychain = k } }

// WithPlatform selects the manifest taken from multi-platform indexes
// (default linux/GOARCH).
func WithPlatform(p v1.Platform) Option { return func(o *options) { o.platform = p } }

// Store resolves references and caches unpacked roots. It is safe for
// concurrent use, also by several processes sharing one directory.
type Store struct {
	dir    string
	logger *slog.Logger
	opts   options

	mu       sync.Mutex
	inflight map[string]*call
}

// call is one unpack in progress, shared by everyone resolving the same
// digest; its work is cancelled only when every waiter has given up.
type call struct {
	done    chan struct{}
	img     *Image
	err     error
	waiters int
	cancel  context.CancelFunc
}

// Open opens (creating it if needed) the store in dir.
func Open(dir string, logger *slog.Logger, opts ...Option) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	o := options{
		transport: remote.DefaultTransport,
		keychain:  authn.DefaultKeychain,
		platform:  v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
	}
	for _, opt := range opts {
		opt(&o)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("opening image store %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("opening image store: %w", err)
	}
	for _, sub := range []string{"blobs/sha256", "roots", "aliases", "tmp"} {
		if err := os.MkdirAll(filepath.Join(abs, sub), 0o700); err != nil {
			return nil, fmt.Errorf("opening image store: %w", err)
		}
	}
	s := &Store{dir: abs, logger: logger, opts: o, inflight: map[string]*call{}}
	s.cleanTmp()
	return s, nil
}

// cleanTmp removes work left behind by crashed processes: every tmp entry
// whose lock nobody holds.
func (s *Store) cleanTmp() {
	tmp := filepath.Join(s.dir, "tmp")
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		lockName, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok {
			continue
		}
		f, err := os.Open(filepath.Join(tmp, e.Name()))
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			if err := removeTree(filepath.Join(tmp, lockName)); err == nil {
				os.Remove(filepath.Join(tmp, e.Name()))
			}
			s.logger.Info("image store: removed leftover work", "dir", filepath.Join(tmp, lockName))
		}
		f.Close()
	}
}

// Resolve returns the image ref names, unpacked, pulling and unpacking it
// the first time only.
func (s *Store) Resolve(ctx context.Context, ref string) (*Image, error) {
	src := rewrite(s.opts.mirrors, ref)
	if src != ref {
		s.logger.Info("image mirror applied", "ref", ref, "source", src)
	}
	img, err := s.resolve(ctx, src)
	if err != nil {
		if src != ref {
			return nil, fmt.Errorf("resolving image %s (mirrored to %s): %w", ref, src, err)
		}
		return nil, fmt.Errorf("resolving image %s: %w", ref, err)
	}
	img.Ref, img.Source = ref, src
	return img, nil
}

// source is an image whose digest is known and whose content can be
// opened when it is not in the cache yet.
type source struct {
	digest string
	// indexDigest is the index the reference pointed at, when it did.
	indexDigest string
	open        func(ctx context.Context) (v1.Image, error)
	// remote layers go through the blob cache; local ones are read in place.
	remote bool
}

func (s *Store) resolve(ctx context.Context, ref string) (*Image, error) {
	p, err := parseRef(ref)
	if err != nil {
		return nil, err
	}
	var src source
	switch p.kind {
	case kindDir:
		fi, err := os.Stat(p.path)
		if err != nil {
			return nil, fmt.Errorf("dir image: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("dir image: %s is not a directory", p.path)
		}
		return &Image{Root: p.path}, nil
	case kindRegistry:
		src, err = s.registrySource(ctx, p.name)
	case kindOCILayout:
		src, err = s.layoutSource(p)
	case kindDockerArchive:
		src, err = s.archiveSource(p.path)
	}
	if err != nil {
		return nil, err
	}
	return s.materialize(ctx, src)
}

func (s *Store) remoteOptions(ctx context.Context) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(s.opts.keychain),
		remote.WithTransport(loopbackOnlyHTTP{s.opts.transport}),
		remote.WithPlatform(s.opts.platform),
		remote.WithUserAgent("evalsi"),
	}
}

// registrySource resolves a registry reference to one image manifest
// digest. Its errors do not name ref: its callers do, once. A digest reference already in the cache needs no request; a tag
// needs one manifest request.
func (s *Store) registrySource(ctx context.Context, ref name.Reference) (source, error) {
	if d, ok := ref.(name.Digest); ok {
		if digest, ok := s.cached(d.DigestStr()); ok {
			return source{digest: digest}, nil
		}
	}
	desc, err := remote.Get(ref, s.remoteOptions(ctx)...)
	if err != nil {
		return source{}, fmt.Errorf("fetching manifest: %w", err)
	}
	digest := desc.Digest.String()
	switch {
	case desc.MediaType.IsIndex():
		idx, err := v1.ParseIndexManifest(strings.NewReader(string(desc.Manifest)))
		if err != nil {
			return source{}, fmt.Errorf("parsing index: %w", err)
		}
		child, err := s.pickPlatform(idx)
		if err != nil {
			return source{}, err
		}
		s.writeAlias(digest, child.String())
		digest = child.String()
	case desc.MediaType.IsImage():
	default:
		return source{}, fmt.Errorf("manifest type %s is not supported (push it as an OCI or docker v2 schema 2 image)", desc.MediaType)
	}
	byDigest := ref.Context().Digest(digest)
	indexDigest := ""
	if digest != desc.Digest.String() {
		indexDigest = desc.Digest.String()
	}
	return source{
		digest:      digest,
		indexDigest: indexDigest,
		remote:      true,
		open: func(ctx context.Context) (v1.Image, error) {
			img, err := remote.Image(byDigest, s.remoteOptions(ctx)...)
			if err != nil {
				return nil, fmt.Errorf("fetching %s: %w", byDigest, err)
			}
			return img, nil
		},
	}, nil
}

// pickPlatform chooses the store's platform from an index.
func (s *Store) pickPlatform(idx *v1.IndexManifest) (v1.Hash, error) {
	var seen []string
	for _, m := range idx.Manifests {
		if !m.MediaType.IsImage() {
			continue
		}
		if m.Platform == nil {
			if len(idx.Manifests) == 1 {
				return m.Digest, nil
			}
			continue
		}
		if m.Platform.Satisfies(s.opts.platform) {
			return m.Digest, nil
		}
		seen = append(seen, m.Platform.String())
	}
	return v1.Hash{}, fmt.Errorf("no image for platform %s in the index (it has: %s)", s.opts.platform.String(), strings.Join(seen, ", "))
}

// layoutSource picks one manifest of an OCI layout by tag, digest, or as
// the only one.
func (s *Store) layoutSource(p parsedRef) (source, error) {
	lp, err := layout.FromPath(p.path)
	if err != nil {
		return source{}, fmt.Errorf("reading OCI layout %s: %w", p.path, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return source{}, fmt.Errorf("reading OCI layout %s: %w", p.path, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return source{}, fmt.Errorf("reading OCI layout %s index.json: %w", p.path, err)
	}
	var desc *v1.Descriptor
	var tags []string
	for i, m := range im.Manifests {
		t := m.Annotations["org.opencontainers.image.ref.name"]
		if t != "" {
			tags = append(tags, t)
		}
		switch {
		case p.digest != (v1.Hash{}) && m.Digest == p.digest,
			p.tag != "" && (t == p.tag || strings.HasSuffix(t, ":"+p.tag)),
			p.tag == "" && p.digest == (v1.Hash{}) && len(im.Manifests) == 1:
			desc = &im.Manifests[i]
		}
		if desc != nil {
			break
		}
	}
	if desc == nil && p.digest != (v1.Hash{}) {
		// A digest not listed in index.json may still be a blob in it.
		mt, err := blobMediaType(lp, p.digest)
		if err != nil {
			return source{}, fmt.Errorf("OCI layout %s has no manifest %s: %w", p.path, p.digest, err)
		}
		desc = &v1.Descriptor{Digest: p.digest, MediaType: mt}
	}
	if desc == nil {
		what := "exactly one manifest when no :tag or @digest is given"
		if p.tag != "" {
			what = "tag " + p.tag
		}
		return source{}, fmt.Errorf("OCI layout %s has no %s (tags: %s)", p.path, what, strings.Join(tags, ", "))
	}
	digest := desc.Digest
	if desc.MediaType.IsIndex() {
		child, err := lp.ImageIndex()
		if err == nil {
			var sub v1.ImageIndex
			sub, err = child.ImageIndex(desc.Digest)
			if err == nil {
				var cm *v1.IndexManifest
				if cm, err = sub.IndexManifest(); err == nil {
					digest, err = s.pickPlatform(cm)
				}
			}
		}
		if err != nil {
			return source{}, fmt.Errorf("OCI layout %s: %w", p.path, err)
		}
	} else if !desc.MediaType.IsImage() {
		return source{}, fmt.Errorf("OCI layout %s: manifest %s has unsupported type %s", p.path, desc.Digest, desc.MediaType)
	}
	indexDigest := ""
	if digest != desc.Digest {
		indexDigest = desc.Digest.String()
	}
	return source{
		digest:      digest.String(),
		indexDigest: indexDigest,
		open: func(context.Context) (v1.Image, error) {
			img, err := lp.Image(digest)
			if err != nil {
				return nil, fmt.Errorf("reading OCI layout %s image %s: %w", p.path, digest, err)
			}
			return img, nil
		},
	}, nil
}

func blobMediaType(lp layout.Path, h v1.Hash) (types.MediaType, error) {
	b, err := lp.Bytes(h)
	if err != nil {
		return "", err
	}
	var m struct {
		MediaType types.MediaType `json:"mediaType"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return "", err
	}
	return m.MediaType, nil
}

// archiveSource reads a `docker save` tarball. Its identity is the config
// digest, which needs no recompression of the uncompressed layers inside.
func (s *Store) archiveSource(path string) (source, error) {
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return source{}, fmt.Errorf("reading docker archive %s (it must hold exactly one image): %w", path, err)
	}
	cn, err := img.ConfigName()
	if err != nil {
		return source{}, fmt.Errorf("reading docker archive %s: %w", path, err)
	}
	return source{
		digest: cn.String(),
		open:   func(context.Context) (v1.Image, error) { return img, nil },
	}, nil
}

// cached returns the root digest for a digest already resolved.
func (s *Store) cached(digest string) (string, bool) {
	if _, err := os.Stat(s.rootDir(digest)); err == nil {
		return digest, true
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "aliases", keyName(digest)))
	if err != nil {
		return "", false
	}
	child := strings.TrimSpace(string(b))
	if _, err := os.Stat(s.rootDir(child)); err == nil {
		return child, true
	}
	return "", false
}

func (s *Store) writeAlias(from, to string) {
	if err := writeFileAtomic(filepath.Join(s.dir, "aliases", keyName(from)), []byte(to+"\n")); err != nil {
		s.logger.Warn("image store: cannot record index alias", "index", from, "err", err)
	}
}

func keyName(digest string) string { return strings.Replace(digest, ":", "-", 1) }

func (s *Store) rootDir(digest string) string {
	return filepath.Join(s.dir, "roots", keyName(digest))
}

// materialize returns the cached root for src, unpacking it once however
// many callers ask at the same time.
func (s *Store) materialize(ctx context.Context, src source) (*Image, error) {
	if img, err := s.load(src.digest); err == nil {
		return img, nil
	}
	if src.open == nil {
		return nil, fmt.Errorf("image %s vanished from the cache", src.digest)
	}
	s.mu.Lock()
	c, ok := s.inflight[src.digest]
	if ok {
		c.waiters++
	} else {
		work, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &call{done: make(chan struct{}), waiters: 1, cancel: cancel}
		s.inflight[src.digest] = c
		go func() {
			c.img, c.err = s.unpack(work, src)
			cancel()
			s.mu.Lock()
			if s.inflight[src.digest] == c {
				delete(s.inflight, src.digest)
			}
			s.mu.Unlock()
			close(c.done)
		}()
	}
	s.mu.Unlock()

	select {
	case <-c.done:
		if c.err != nil {
			return nil, c.err
		}
		img := *c.img
		return &img, nil
	case <-ctx.Done():
		s.mu.Lock()
		if c.waiters--; c.waiters == 0 {
			// Nobody wants it any more: stop it, and let the next caller
			// start afresh instead of joining a cancelled unpack.
			c.cancel()
			if s.inflight[src.digest] == c {
				delete(s.inflight, src.digest)
			}
		}
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

// load reads a complete cached root.
func (s *Store) load(digest string) (*Image, error) {
	dir := s.rootDir(digest)
	b, err := os.ReadFile(filepath.Join(dir, "image.json"))
	if err != nil {
		return nil, err
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("cached image %s: %w", digest, err)
	}
	img.Root = filepath.Join(dir, "rootfs")
	return &img, nil
}

// unpack builds a root in tmp/ and renames it into roots/.
func (s *Store) unpack(ctx context.Context, src source) (*Image, error) {
	if img, err := s.load(src.digest); err == nil {
		return img, nil // another process finished meanwhile
	}
	img, err := src.open(ctx)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading image config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("listing layers: %w", err)
	}

	work, release, err := s.tmpDir()
	if err != nil {
		return nil, err
	}
	defer release()
	rootfs := filepath.Join(work, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return nil, fmt.Errorf("creating root: %w", err)
	}
	s.logger.Info("unpacking image", "digest", src.digest, "layers", len(layers))
	u := newUnpacker(rootfs, s.logger)
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := s.applyLayer(ctx, u, l, src.remote); err != nil {
			return nil, fmt.Errorf("unpacking layer %d of %d: %w", i+1, len(layers), err)
		}
	}
	if err := u.finish(); err != nil {
		return nil, err
	}
	meta := Image{Digest: src.digest, Env: cfg.Config.Env, WorkingDir: cfg.Config.WorkingDir, User: cfg.Config.User}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(work, "image.json"), b, 0o600); err != nil {
		return nil, fmt.Errorf("writing image metadata: %w", err)
	}
	if err := os.Rename(work, s.rootDir(src.digest)); err != nil {
		// Another process may have won the race; its root is as good.
		if img, lerr := s.load(src.digest); lerr == nil {
			return img, nil
		}
		return nil, fmt.Errorf("publishing unpacked root: %w", err)
	}
	return s.load(src.digest)
}

func (s *Store) applyLayer(ctx context.Context, u *unpacker, l v1.Layer, remote bool) error {
	d, err := l.Digest()
	if err != nil {
		return err
	}
	var rc io.ReadCloser
	if remote {
		f, err := s.blob(l, d)
		if err != nil {
			return err
		}
		defer f.Close()
		rc, err = decompress(f)
		if err != nil {
			return fmt.Errorf("layer %s: %w", d, err)
		}
	} else {
		rc, err = l.Uncompressed()
		if err != nil {
			return fmt.Errorf("layer %s: %w", d, err)
		}
	}
	defer rc.Close()
	return u.apply(d.String(), ctxReader{ctx, rc})
}

// blob returns the cached compressed blob of a remote layer, downloading
// and verifying it first when needed.
func (s *Store) blob(l v1.Layer, d v1.Hash) (*os.File, error) {
	if d.Algorithm != "sha256" || len(d.Hex) != 64 {
		return nil, fmt.Errorf("layer digest %s: only sha256 is supported", d)
	}
	if _, err := hex.DecodeString(d.Hex); err != nil {
		return nil, fmt.Errorf("layer digest %s: %w", d, err)
	}
	p := filepath.Join(s.dir, "blobs", "sha256", d.Hex)
	if f, err := os.Open(p); err == nil {
		return f, nil
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("fetching layer %s: %w", d, err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(p), "tmp-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), rc)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("fetching layer %s: %w", d, err)
	}
	if got := hexSum(h); got != d.Hex {
		return nil, fmt.Errorf("layer %s: downloaded content has digest sha256:%s", d, got)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return nil, err
	}
	return os.Open(p)
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// tmpDir makes a locked work directory; release removes whatever is left
// of it (nothing, once renamed) and its lock.
func (s *Store) tmpDir() (string, func(), error) {
	lock, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "w-*.lock")
	if err != nil {
		return "", nil, fmt.Errorf("creating work directory: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		os.Remove(lock.Name())
		return "", nil, fmt.Errorf("locking work directory: %w", err)
	}
	dir := strings.TrimSuffix(lock.Name(), ".lock")
	if err := os.Mkdir(dir, 0o700); err != nil {
		lock.Close()
		os.Remove(lock.Name())
		return "", nil, fmt.Errorf("creating work directory: %w", err)
	}
	return dir, func() {
		if err := removeTree(dir); err != nil {
			s.logger.Warn("image store: cannot remove work directory", "dir", dir, "err", err)
		}
		os.Remove(lock.Name())
		lock.Close()
	}, nil
}

// removeTree removes dir even when it holds read-only directories.
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

func writeFileAtomic(p string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// ctxReader stops a long unpack when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// loopbackOnlyHTTP refuses plain-HTTP requests except to loopback hosts.
// go-containerregistry also falls back to HTTP for RFC 1918 and *.local
// registries; credentials and images must not travel unencrypted there.
type loopbackOnlyHTTP struct{ next http.RoundTripper }

func (t loopbackOnlyHTTP) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !isLoopbackHost(req.URL.Host) {
		return nil, errors.New("refusing plain HTTP to " + req.URL.Host + ": only loopback registries may be used without TLS")
	}
	return t.next.RoundTrip(req)
}
