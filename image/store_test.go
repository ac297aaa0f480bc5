package image

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"evals.si/internal/testenv"
)

func openStore(t *testing.T, opts ...Option) (*Store, *testenv.LogCounter) {
	t.Helper()
	lc := &testenv.LogCounter{}
	s, err := Open(t.TempDir(), slog.New(lc), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, lc
}

func push(t *testing.T, ref string, img v1.Image) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
}

func writeLayout(t *testing.T, img v1.Image, tag string) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRegistryPullAndCache(t *testing.T) {
	reg := startRegistry(t)
	img := testImage(t)
	ref := reg.host + "/evalsi/test:v1"
	push(t, ref, img)
	want, _ := img.Digest()

	cnt := &counter{next: remote.DefaultTransport}
	s, lc := openStore(t, WithTransport(cnt))
	ctx := context.Background()
	got, err := s.Resolve(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != want.String() || got.Ref != ref {
		t.Errorf("digest %s ref %s, want %s %s", got.Digest, got.Ref, want, ref)
	}
	checkTestImage(t, got)
	if cnt.blobs.Load() == 0 {
		t.Fatalf("first resolve fetched no blobs")
	}

	// Same tag again: the manifest is checked, no blob is fetched, nothing
	// is unpacked.
	cnt.manifests.Store(0)
	cnt.blobs.Store(0)
	again, err := s.Resolve(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if again.Root != got.Root || cnt.blobs.Load() != 0 || cnt.manifests.Load() != 1 {
		t.Errorf("second resolve: root %s (first %s), %d manifest requests, %d blob requests", again.Root, got.Root, cnt.manifests.Load(), cnt.blobs.Load())
	}
	// By digest: no request at all.
	cnt.total.Store(0)
	byDigest, err := s.Resolve(ctx, reg.host+"/evalsi/test@"+want.String())
	if err != nil {
		t.Fatal(err)
	}
	if byDigest.Root != got.Root || cnt.total.Load() != 0 {
		t.Errorf("digest resolve: root %s, %d requests", byDigest.Root, cnt.total.Load())
	}
	if n := lc.Count("unpacking image"); n != 1 {
		t.Errorf("unpacked %d times, want 1", n)
	}

	// A fresh store over the same directory sees the cache too.
	s2, err := Open(s.dir, nil, WithTransport(cnt))
	if err != nil {
		t.Fatal(err)
	}
	cnt.blobs.Store(0)
	if _, err := s2.Resolve(ctx, ref); err != nil || cnt.blobs.Load() != 0 {
		t.Errorf("reopened store: %v, %d blob requests", err, cnt.blobs.Load())
	}
}

func TestRegistryPushedWithSkopeo(t *testing.T) {
	reg := startRegistry(t)
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		testenv_Missing(t, "skopeo")
	}
	dir := writeLayout(t, testImage(t), "v2")
	out, err := exec.Command(skopeo, "copy", "--dest-tls-verify=false", "oci:"+dir+":v2", "docker://"+reg.host+"/skopeo/img:v2").CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy: %v\n%s", err, out)
	}
	s, _ := openStore(t)
	got, err := s.Resolve(context.Background(), reg.host+"/skopeo/img:v2")
	if err != nil {
		t.Fatal(err)
	}
	checkTestImage(t, got)
}

func TestRegistryIndexPicksPlatform(t *testing.T) {
	reg := startRegistry(t)
	mine := testImage(t)
	other, err := mutate.AppendLayers(empty.Image, layerOf(t, file("other", "wrong platform", 0o644)))
	if err != nil {
		t.Fatal(err)
	}
	otherArch := "s390x"
	if runtime.GOARCH == otherArch {
		otherArch = "amd64"
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: otherArch}}},
		mutate.IndexAddendum{Add: mine, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)
	r, _ := name.ParseReference(reg.host+"/multi/img:latest", name.Insecure)
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
	cnt := &counter{next: remote.DefaultTransport}
	s, _ := openStore(t, WithTransport(cnt))
	got, err := s.Resolve(context.Background(), reg.host+"/multi/img")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := mine.Digest()
	if got.Digest != want.String() {
		t.Errorf("digest %s, want the %s manifest %s", got.Digest, runtime.GOARCH, want)
	}
	checkTestImage(t, got)
	// The index digest is remembered: no request the second time.
	idxDigest, _ := idx.Digest()
	cnt.total.Store(0)
	if again, err := s.Resolve(context.Background(), reg.host+"/multi/img@"+idxDigest.String()); err != nil || again.Root != got.Root || cnt.total.Load() != 0 {
		t.Errorf("index digest resolve: %v, %d requests", err, cnt.total.Load())
	}
}

func TestOCILayout(t *testing.T) {
	img := testImage(t)
	dir := writeLayout(t, img, "v1")
	d, _ := img.Digest()
	s, _ := openStore(t)
	for _, ref := range []string{"oci-layout:" + dir, "oci-layout:" + dir + ":v1", "oci-layout:" + dir + "@" + d.String()} {
		got, err := s.Resolve(context.Background(), ref)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if got.Digest != d.String() {
			t.Errorf("%s: digest %s, want %s", ref, got.Digest, d)
		}
		checkTestImage(t, got)
	}
	if _, err := s.Resolve(context.Background(), "oci-layout:"+dir+":nope"); err == nil || !strings.Contains(err.Error(), "tags: v1") {
		t.Errorf("unknown tag: %v", err)
	}
}

func TestDockerArchive(t *testing.T) {
	img := testImage(t)
	p := filepath.Join(t.TempDir(), "img.tar")
	tag, _ := name.NewTag("example.com/archived:v1")
	if err := tarball.WriteToFile(p, tag, img); err != nil {
		t.Fatal(err)
	}
	s, _ := openStore(t)
	got, err := s.Resolve(context.Background(), "docker-archive:"+p)
	if err != nil {
		t.Fatal(err)
	}
	cn, _ := img.ConfigName()
	if got.Digest != cn.String() {
		t.Errorf("digest %s, want config digest %s", got.Digest, cn)
	}
	checkTestImage(t, got)
}

func TestDir(t *testing.T) {
	root := t.TempDir()
	s, _ := openStore(t)
	got, err := s.Resolve(context.Background(), "dir:"+root)
	if err != nil {
		t.Fatal(err)
	}
	if got.Root != root || got.Digest != "" {
		t.Errorf("dir image: %+v", got)
	}
	if _, err := s.Resolve(context.Background(), "dir:"+filepath.Join(root, "missing")); err == nil {
		t.Errorf("missing dir resolved")
	}
}

func TestMirrorToLayout(t *testing.T) {
	dir := writeLayout(t, testImage(t), "3.13-slim")
	s, _ := openStore(t, WithMirrors(map[string]string{"docker.io/library/python": "oci-layout:" + dir}))
	got, err := s.Resolve(context.Background(), "python:3.13-slim")
	if err != nil {
		t.Fatal(err)
	}
	if got.Ref != "python:3.13-slim" || got.Source != "oci-layout:"+dir+":3.13-slim" {
		t.Errorf("ref %q source %q", got.Ref, got.Source)
	}
	checkTestImage(t, got)
}

func TestRewrite(t *testing.T) {
	m := map[string]string{
		"docker.io/library/python":      "127.0.0.1:5000/python",
		"docker.io/library/python:3.12": "oci-layout:/m/py312",
		"ghcr.io/org/":                  "127.0.0.1:5000/ghcr/",
	}
	for _, tc := range []struct{ in, want string }{
		{"python:3.13-slim", "127.0.0.1:5000/python:3.13-slim"},
		{"docker.io/library/python:3.13-slim", "127.0.0.1:5000/python:3.13-slim"},
		{"index.docker.io/library/python@sha256:" + strings.Repeat("a", 64), "127.0.0.1:5000/python@sha256:" + strings.Repeat("a", 64)},
		{"python:3.12", "oci-layout:/m/py312"},
		{"pythonista:1", "pythonista:1"},
		{"ghcr.io/org/tool:v1", "127.0.0.1:5000/ghcr/tool:v1"},
		{"oci-layout:/x", "oci-layout:/x"},
	} {
		if got := rewrite(m, tc.in); got != tc.want {
			t.Errorf("rewrite(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestConcurrentResolveUnpacksOnce(t *testing.T) {
	dir := writeLayout(t, testImage(t), "v1")
	s, lc := openStore(t)
	var wg sync.WaitGroup
	roots := make([]string, 8)
	errs := make([]error, 8)
	for i := range roots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			img, err := s.Resolve(context.Background(), "oci-layout:"+dir+":v1")
			errs[i] = err
			if err == nil {
				roots[i] = img.Root
			}
		}()
	}
	wg.Wait()
	for i := range roots {
		if errs[i] != nil || roots[i] != roots[0] {
			t.Errorf("resolve %d: %v root %s (first %s)", i, errs[i], roots[i], roots[0])
		}
	}
	if n := lc.Count("unpacking image"); n != 1 {
		t.Errorf("unpacked %d times, want 1", n)
	}
}

func TestCancelledResolve(t *testing.T) {
	dir := writeLayout(t, testImage(t), "v1")
	s, _ := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Resolve(ctx, "oci-layout:"+dir); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled resolve: %v", err)
	}
	// Nothing half-made is left to be mistaken for a root.
	if img, err := s.Resolve(context.Background(), "oci-layout:"+dir); err != nil {
		t.Fatal(err)
	} else {
		checkTestImage(t, img)
	}
}

func TestLeftoverWorkRemovedOnOpen(t *testing.T) {
	s, _ := openStore(t)
	// A crashed unpack: an unlocked lock file and its half-made directory.
	half := filepath.Join(s.dir, "tmp", "w-crashed")
	if err := os.MkdirAll(filepath.Join(half, "rootfs", "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(half+".lock", nil, 0o600)
	if _, err := Open(s.dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(half); !os.IsNotExist(err) {
		t.Errorf("leftover work not removed: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(s.dir, "roots"))
	if len(ents) != 0 {
		t.Errorf("roots/ has %d entries", len(ents))
	}
}

func TestPlainHTTPOnlyForLoopback(t *testing.T) {
	cnt := &counter{next: remote.DefaultTransport}
	s, _ := openStore(t, WithTransport(cnt))
	rt := loopbackOnlyHTTP{cnt}
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://10.1.2.3:5000/v2/", false},
		{"http://registry.local/v2/", false},
	} {
		req, _ := httpNewRequest(tc.url)
		_, err := rt.RoundTrip(req)
		if err == nil || !strings.Contains(err.Error(), "refusing plain HTTP") {
			t.Errorf("%s: %v", tc.url, err)
		}
	}
	if cnt.total.Load() != 0 {
		t.Errorf("refused requests reached the transport")
	}
	_ = s
	for _, h := range []string{"127.0.0.1:5000", "localhost:5000", "[::1]:5000"} {
		if !isLoopbackHost(h) {
			t.Errorf("%s not loopback", h)
		}
	}
	if isLoopbackHost("10.0.0.1:5000") {
		t.Errorf("10.0.0.1 loopback")
	}
}
