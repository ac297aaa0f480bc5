package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ent is one tar entry of a test layer.
type ent struct {
	name, body, link string
	typ              byte
	mode             int64
}

func file(name, body string, mode int64) ent {
	return ent{name: name, body: body, typ: tar.TypeReg, mode: mode}
}
func dir(name string, mode int64) ent { return ent{name: name, typ: tar.TypeDir, mode: mode} }
func symlink(name, target string) ent {
	return ent{name: name, link: target, typ: tar.TypeSymlink, mode: 0o777}
}
func hardlink(name, target string) ent {
	return ent{name: name, link: target, typ: tar.TypeLink, mode: 0o644}
}
func whiteout(name string) ent { return ent{name: name, typ: tar.TypeReg, mode: 0o644} }

func tarBytes(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.typ == tar.TypeChar {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			io.WriteString(tw, e.body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func layerOf(t testing.TB, ents ...ent) v1.Layer {
	t.Helper()
	b := tarBytes(t, ents...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage is a small image: a random layer, a base layer, and a layer of
// whiteouts, with a config that sets Env, WorkingDir and User.
func testImage(t testing.TB) v1.Image {
	t.Helper()
	rnd, err := random.Layer(4096, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	base := layerOf(t,
		dir("etc/", 0o755),
		file("etc/hello", "hello\n", 0o644),
		hardlink("etc/hello-link", "etc/hello"),
		dir("bin/", 0o755),
		file("bin/tool", "#!/bin/sh\necho tool\n", 0o755),
		symlink("tool", "/bin/tool"),
		dir("gone/", 0o755),
		file("gone/a", "a", 0o644),
		file("removeme", "x", 0o644),
		dir("opq/", 0o755),
		file("opq/old", "old", 0o644),
		dir("ro/", 0o555),
		file("ro/f", "f", 0o444),
		ent{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
	)
	top := layerOf(t,
		whiteout("gone/.wh..wh..opq"), // contents of gone/ hidden
		whiteout(".wh.removeme"),
		dir("opq/", 0o755),
		file("opq/new", "new", 0o644),
		whiteout("opq/.wh..wh..opq"), // after opq/new: same-layer entries stay
		file("ro/g", "g", 0o444),     // into a read-only directory
	)
	img, err := mutate.AppendLayers(empty.Image, rnd, base, top)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{
		Env:        []string{"PATH=/usr/bin:/bin", "GREETING=hi"},
		WorkingDir: "/work",
		User:       "1000:1000",
	})
	if err != nil {
		t.Fatal(err)
	}
	return mutate.MediaType(img, types.OCIManifestSchema1)
}

// checkTestImage checks a resolved testImage.
func checkTestImage(t *testing.T, img *Image) {
	t.Helper()
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(img.Root, p))
		if err != nil {
			t.Errorf("reading %s: %v", p, err)
		}
		return string(b)
	}
	absent := func(p string) {
		if _, err := os.Lstat(filepath.Join(img.Root, p)); err == nil {
			t.Errorf("%s exists, want it removed by a whiteout", p)
		}
	}
	if got := read("etc/hello"); got != "hello\n" {
		t.Errorf("etc/hello = %q", got)
	}
	a, _ := os.Stat(filepath.Join(img.Root, "etc/hello"))
	b, _ := os.Stat(filepath.Join(img.Root, "etc/hello-link"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Errorf("etc/hello-link is not a hard link to etc/hello")
	}
	if fi, err := os.Stat(filepath.Join(img.Root, "bin/tool")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/tool mode: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(img.Root, "tool")); err != nil || l != "/bin/tool" {
		t.Errorf("tool symlink = %q, %v", l, err)
	}
	absent("gone/a")
	absent("removeme")
	absent("opq/old")
	absent("dev/null")
	if got := read("opq/new"); got != "new" {
		t.Errorf("opq/new = %q", got)
	}
	if got := read("ro/g"); got != "g" {
		t.Errorf("ro/g = %q", got)
	}
	if fi, err := os.Stat(filepath.Join(img.Root, "ro")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("ro mode: %v %v", fi, err)
	}
	if strings.Join(img.Env, ",") != "PATH=/usr/bin:/bin,GREETING=hi" || img.WorkingDir != "/work" || img.User != "1000:1000" {
		t.Errorf("config: env %q workdir %q user %q", img.Env, img.WorkingDir, img.User)
	}
}

// registry is Debian's docker-registry serving a temporary directory on
// loopback.
type registry struct{ host string }

func startRegistry(t *testing.T) *registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		testenv.Missing(t, "docker-registry", "apt-get install docker-registry")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := fmt.Sprintf("version: 0.1\nlog: {level: error}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: %s}\n", filepath.Join(dir, "data"), addr)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if i == 200 {
			t.Fatalf("docker-registry did not start: %v\n%s", err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &registry{host: addr}
}

// counter counts the requests a Store makes.
type counter struct {
	total, blobs, manifests atomic.Int64
	next                    http.RoundTripper
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.total.Add(1)
	if strings.Contains(r.URL.Path, "/blobs/") {
		c.blobs.Add(1)
	}
	if strings.Contains(r.URL.Path, "/manifests/") {
		c.manifests.Add(1)
	}
	return c.next.RoundTrip(r)
}

func testenv_Missing(t *testing.T, tool string) {
	testenv.Missing(t, tool, "apt-get install "+tool)
}

func httpNewRequest(url string) (*http.Request, error) {
	return http.NewRequest(http.MethodGet, url, nil)
}
