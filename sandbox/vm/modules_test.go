package vm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv"
)

// testKernel returns the guest kernel bundle scripts/build-vm-kernel.sh
// caches (.ci/setup runs it): the bzImage and its modules directory.
func testKernel(t *testing.T) (kernel, modules string) {
	t.Helper()
	out, err := exec.Command("bash", "../../scripts/build-vm-kernel.sh", "--cached").Output()
	if err != nil {
		testenv.Missing(t, "the guest kernel bundle", "scripts/build-vm-kernel.sh --cached: "+err.Error()+"; run bash scripts/build-vm-kernel.sh")
	}
	kernel = strings.TrimSpace(string(out))
	// The release, independently of KernelRelease: the bundle's single
	// lib/modules entry.
	ents, err := os.ReadDir(filepath.Join(filepath.Dir(kernel), "..", "lib", "modules"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("the kernel bundle of %s should have one lib/modules/RELEASE: %v %v", kernel, ents, err)
	}
	return kernel, filepath.Join(filepath.Dir(kernel), "..", "lib", "modules", ents[0].Name())
}

func TestResolveGuestModules(t *testing.T) {
	_, dir := testKernel(t)
	mods, err := ResolveModules(dir, guestModules())
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range mods {
		if _, dup := pos[m.Name]; dup {
			t.Errorf("%s is listed twice", m.Name)
		}
		pos[m.Name] = i
		if st, err := os.Stat(filepath.Join(dir, m.Path)); err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s: %s is not a file: %v", m.Name, m.Path, err)
		}
		if moduleName(strings.TrimSuffix(filepath.Base(m.Path), ".ko")) != m.Name {
			t.Errorf("%s is at %s, a file of another name", m.Name, m.Path)
		}
	}
	// Every module comes after what its own .modinfo says it depends on:
	// the order finit_module needs.
	for i, m := range mods {
		mi, err := readModinfo(filepath.Join(dir, m.Path))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range mi.depends {
			j, ok := pos[moduleName(d)]
			if !ok {
				t.Errorf("%s depends on %s, which is not in the list", m.Name, d)
			} else if j > i {
				t.Errorf("%s (at %d) comes before its dependency %s (at %d)", m.Name, i, d, j)
			}
		}
	}
	// The orders the brief names (Debian's 6.1 build has all of these as
	// modules), and ext4's soft dependency on crc32c, which its metadata
	// checksums need at mount: the generic implementation, which loads on
	// any CPU, not crc32c-intel.
	for _, chain := range [][]string{
		{"virtio_ring", "virtio", "virtio_mmio"},
		{"virtio", "virtio_blk"},
		{"virtio", "virtio_console"},
		{"crc16", "ext4"}, {"jbd2", "ext4"}, {"mbcache", "ext4"},
		{"crc32c_generic", "jbd2"}, {"crc32c_generic", "ext4"},
		{"virtio", "virtio_rng"},
		{"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport"},
	} {
		for k := 0; k+1 < len(chain); k++ {
			a, oka := pos[chain[k]]
			b, okb := pos[chain[k+1]]
			if !oka || !okb || a >= b {
				t.Errorf("want %s before %s in %v", chain[k], chain[k+1], mods)
			}
		}
	}
	if _, ok := pos["crc32c_intel"]; ok {
		t.Errorf("crc32c_intel is listed: an emulated CPU without SSE4.2 would refuse it")
	}
}

func TestResolveModulesNames(t *testing.T) {
	_, dir := testKernel(t)
	builtin := firstBuiltin(t, dir)
	tests := []struct {
		name    string
		modules []string
		want    []string // names in order
		wantErr []string // substrings of the error
	}{
		{name: "dash and underscore are the same", modules: []string{"virtio-rng"}, want: []string{"virtio_ring", "virtio", "virtio_rng"}},
		{name: "file names with dashes", modules: []string{"virtio_rng"}, want: []string{"virtio_ring", "virtio", "virtio_rng"}},
		{name: "shared dependencies once", modules: []string{"virtio_blk", "virtio_mmio"}, want: []string{"virtio_ring", "virtio", "virtio_blk", "virtio_mmio"}},
		{name: "a built-in module needs no file", modules: []string{builtin}, want: nil},
		{name: "a missing module names itself and the directory", modules: []string{"virtio_blk", "no_such_module"},
			wantErr: []string{"no_such_module", filepath.Join(dir, "kernel"), "modules.builtin"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mods, err := ResolveModules(dir, tt.modules)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("no error, modules %v", mods)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range mods {
				got = append(got, m.Name)
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// firstBuiltin returns a module modules.builtin lists that has no .ko file.
func firstBuiltin(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Fields(string(data)) {
		if _, err := os.Stat(filepath.Join(dir, l)); err != nil {
			return strings.TrimSuffix(filepath.Base(l), ".ko")
		}
	}
	t.Fatalf("%s/modules.builtin lists no built-in module", dir)
	return ""
}

// TestResolveModulesBrokenDirs copies real modules into directories that
// lack a dependency or hold a compressed module.
func TestResolveModulesBrokenDirs(t *testing.T) {
	_, dir := testKernel(t)
	copyMod := func(t *testing.T, dst, rel, as string) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, filepath.Dir(rel), as)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a missing dependency names what needs it", func(t *testing.T) {
		d := t.TempDir()
		copyMod(t, d, "kernel/drivers/virtio/virtio_mmio.ko", "virtio_mmio.ko")
		_, err := ResolveModules(d, []string{"virtio_mmio"})
		if err == nil || !strings.Contains(err.Error(), "needed by virtio_mmio") || !strings.Contains(err.Error(), d) {
			t.Fatalf("err = %v, want one saying a dependency of virtio_mmio is missing under %s", err, d)
		}
	})
	t.Run("a compressed module is refused by name", func(t *testing.T) {
		d := t.TempDir()
		copyMod(t, d, "kernel/drivers/virtio/virtio_ring.ko", "virtio_ring.ko.xz")
		_, err := ResolveModules(d, []string{"virtio_ring"})
		if err == nil || !strings.Contains(err.Error(), "virtio_ring.ko.xz is compressed") {
			t.Fatalf("err = %v, want one naming the compressed file", err)
		}
	})
	t.Run("no modules directory", func(t *testing.T) {
		_, err := ResolveModules(filepath.Join(t.TempDir(), "none"), []string{"ext4"})
		if err == nil || !strings.Contains(err.Error(), "modules directory") {
			t.Fatalf("err = %v, want one about the modules directory", err)
		}
	})
}
