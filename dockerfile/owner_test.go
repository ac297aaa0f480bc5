package dockerfile

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv"
)

// TestOwnershipInAShell runs the chown and WORKDIR steps a translation
// makes in a real shell, with real chown, against an image's /etc/passwd
// and /etc/group (bind-mounted in a private mount namespace): owners
// resolve as BuildKit resolves them, and a WORKDIR chowns only the
// directories it created.
func TestOwnershipInAShell(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "chown to other users and mount namespaces need root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.Missing(t, "unshare", "util-linux's unshare is not on PATH")
	}
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	passwd := write("passwd", "root:x:0:0::/root:/bin/sh\napp:x:1234:1300::/home/app:/bin/sh\n")
	group := write("group", "root:x:0:\ndev:x:4321:\n")
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "existing"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		spec, file, want string
	}{
		{"app", "f1", "1234:1300"},       // name: uid and primary gid from passwd
		{"app:dev", "f2", "1234:4321"},   // group name from /etc/group
		{"app:77", "f3", "1234:77"},      // gid
		{"nosuch", "f4", "0:0"},          // a name passwd lacks is 0:0
		{"555", "f5", "555:555"},         // a uid alone is also the gid
		{"555:nogroup", "f6", "555:555"}, // a group name /etc/group lacks keeps the gid
		{"root:dev", "f7", "0:4321"},
	}
	var script []string
	script = append(script, "mount --bind "+Quote(passwd)+" /etc/passwd", "mount --bind "+Quote(group)+" /etc/group")
	var stat []string
	for _, c := range cases {
		p := filepath.Join(root, c.file)
		write("root/"+c.file, "x")
		script = append(script, chownCmd(c.spec, []string{p}))
		stat = append(stat, Quote(p))
	}
	// A WORKDIR under an existing directory; and two a later COPY placed
	// files in before setup ran: one holding only those (created by the
	// WORKDIR in Docker), one holding more (it existed before).
	tr := &translator{files: map[string]File{}, dirs: map[string]bool{}, placedDirs: map[string]int{}}
	for _, d := range []string{"placed", "mixed"} {
		p := filepath.Join(root, "existing", d)
		tr.files[p+"/f"] = File{}
		tr.placedDirs[p] = 5
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		write("root/existing/"+d+"/f", "x")
	}
	write("root/existing/mixed/own", "x")
	// A home a RUN made (useradd -m) under a directory holding nothing
	// else: going up stops at the home, which holds more than the COPY's.
	if err := os.MkdirAll(filepath.Join(root, "h/agent/app"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("root/h/agent/.bashrc", "x")
	write("root/h/agent/app/f", "x")
	tr.files[filepath.Join(root, "h/agent/app/f")] = File{}
	for _, d := range []string{"h", "h/agent", "h/agent/app"} {
		tr.placedDirs[filepath.Join(root, d)] = 5
	}
	for _, d := range []string{"existing/new/deeper", "existing/placed", "existing/mixed", "h/agent/app"} {
		script = append(script, tr.mkdirOwned(mkdirStep{dir: filepath.Join(root, d), user: "app:dev", seq: 3}))
	}
	for _, d := range []string{"existing", "existing/new", "existing/new/deeper", "existing/placed", "existing/placed/f", "existing/mixed", "h", "h/agent", "h/agent/app"} {
		stat = append(stat, Quote(filepath.Join(root, d)))
	}
	script = append(script, "stat -c '%u:%g' "+strings.Join(stat, " "))
	out, err := exec.CommandContext(t.Context(), "unshare", "--mount", "--propagation", "private", "sh", "-ec", strings.Join(script, "\n")).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := strings.Fields(string(out))
	want := []string{}
	for _, c := range cases {
		want = append(want, c.want)
	}
	// existing stays root's; what the WORKDIR made is app's; the placed
	// file stays root's, as a COPY without --chown leaves it.
	want = append(want, "0:0", "1234:4321", "1234:4321", "1234:4321", "0:0", "0:0", "0:0", "0:0", "1234:4321")
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("owners\n got %q\nwant %q", got, want)
	}
}
