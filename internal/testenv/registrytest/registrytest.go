// Package registrytest runs a real image registry for tests: Debian's
// docker-registry serving a temporary directory on a loopback port, and
// pushes images to it. Test support only.
package registrytest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"evals.si/internal/testenv"
)

// Registry is a running registry.
type Registry struct {
	// Host is its host:port on loopback (plain HTTP).
	Host string
}

// Start runs a registry until the test ends. A machine without
// docker-registry reports the facility missing.
func Start(t testing.TB) *Registry {
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
		t.Fatalf("starting docker-registry: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if i == 200 {
			t.Fatalf("docker-registry did not start on %s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &Registry{Host: addr}
}

// Push writes img to the registry as repo:tag and returns its reference
// (Host/repo:tag).
func (r *Registry) Push(t testing.TB, repo, tag string, img v1.Image) string {
	t.Helper()
	ref := r.Host + "/" + repo + ":" + tag
	n, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(n, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	return ref
}

// PushLayout pushes the first image of an oci-layout:PATH reference (the
// local benchmark image) as repo:tag and returns its reference.
func (r *Registry) PushLayout(t testing.TB, ociRef, repo, tag string) string {
	t.Helper()
	p, ok := strings.CutPrefix(ociRef, "oci-layout:")
	if !ok {
		t.Fatalf("%q is not an oci-layout: reference", ociRef)
	}
	lp, err := layout.FromPath(p)
	if err != nil {
		t.Fatalf("opening %s: %v", p, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) == 0 {
		t.Fatalf("%s holds no image", p)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return r.Push(t, repo, tag, img)
}
