package bwrap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/sandbox"
)

// Over an image the sandbox's own /etc files win: over the image's files,
// over a dangling symlink (resolv.conf -> a systemd-resolved path), with a
// read-only root too; root inside may write them, and a snapshot holds
// none of their contents.
func TestEtcFilesOverImage(t *testing.T) {
	needRootEngine(t)
	root := debianRoot(t)
	etc := filepath.Join(root, "etc")
	os.WriteFile(filepath.Join(etc, "hostname"), []byte("imagehost\n"), 0o644)
	os.WriteFile(filepath.Join(etc, "hosts"), []byte("10.9.9.9\timagehost\n"), 0o644)
	os.Remove(filepath.Join(etc, "resolv.conf"))
	if err := os.Symlink("../run/systemd/resolve/stub-resolv.conf", filepath.Join(etc, "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	host, _ := os.ReadFile("/etc/resolv.conf")
	check := func(t *testing.T, sb sandbox.Sandbox) string {
		t.Helper()
		res := run(t, sb, `hostname; cat /etc/hostname; cat /etc/resolv.conf; echo ---; cat /etc/hosts; getent hosts localhost "$(hostname)" >/dev/null && echo resolves`)
		out := string(res.Stdout)
		lines := strings.Split(out, "\n")
		if res.ExitCode != 0 || len(lines) < 2 || lines[0] != lines[1] || len(lines[0]) != 12 {
			t.Fatalf("hostname and /etc/hostname: exit %d, %q, stderr %s", res.ExitCode, out, res.Stderr)
		}
		resolv, hosts, _ := strings.Cut(strings.Join(lines[2:], "\n"), "---\n")
		if resolv != string(sandbox.ResolvConf(host)) {
			t.Errorf("/etc/resolv.conf %q, want %q", resolv, sandbox.ResolvConf(host))
		}
		if strings.Contains(hosts, "imagehost") || !strings.Contains(hosts, "127.0.1.1\t"+lines[0]+"\n") || !strings.Contains(out, "resolves") {
			t.Errorf("/etc/hosts over the image's: %q", out)
		}
		return lines[0]
	}
	t.Run("ReadOnlyRoot", func(t *testing.T) {
		sb := create(t, sandbox.Config{Root: root, Workdir: "/app", ReadOnlyRoot: true})
		check(t, sb)
		if res := run(t, sb, "echo '192.0.2.1\tadded.test' >> /etc/hosts && getent hosts added.test"); res.ExitCode != 0 {
			t.Errorf("root inside cannot edit /etc/hosts under a read-only root: %s", res.Stderr)
		}
	})
	sb := create(t, sandbox.Config{Root: root, Workdir: "/app"})
	name := check(t, sb)
	if res := run(t, sb, "echo '192.0.2.1\tadded.test' >> /etc/hosts && echo other > /etc/hostname && echo 'nameserver 192.0.2.53' >> /etc/resolv.conf"); res.ExitCode != 0 {
		t.Fatalf("root inside cannot edit its /etc files: %s", res.Stderr)
	}
	layer, err := sb.(sandbox.Snapshotter).Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(layer.Dir) })
	// The image's dangling resolv.conf symlink was replaced by an empty
	// mount point, which the layer carries; none of the contents.
	for _, f := range etcFiles {
		if fi, err := os.Lstat(filepath.Join(layer.Dir, "etc", f)); err == nil && (f != "resolv.conf" || fi.Size() != 0) {
			t.Errorf("the snapshot layer holds etc/%s (%d bytes)", f, fi.Size())
		}
	}
	restored := create(t, sandbox.Config{Root: root, Workdir: "/app", Layers: []sandbox.Layer{layer}})
	if again := check(t, restored); again == name {
		t.Errorf("the restored sandbox kept the hostname %s", name)
	}
}
