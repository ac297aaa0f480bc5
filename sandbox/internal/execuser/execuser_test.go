package execuser

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"evals.si/internal/testenv"
)

const passwd = "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n"

// What the sandbox's root may put at /etc/passwd: each hostile kind is an
// error that names the file, returned without blocking (a FIFO with no
// writer would hang a blocking open or read forever) and without reading
// what lies outside the sandbox's root or in the kernel's files; a
// symlink to a real file, and no file at all, resolve as docker's do.
func TestLookupFiles(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(outside) // a file the reader has open, as a server holds its own
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		err  string // "" resolves agent to uid 1000
	}{
		{"regular", func(t *testing.T, p string) { write(t, p, passwd) }, ""},
		{"symlink to a regular file", func(t *testing.T, p string) {
			write(t, p+".real", passwd)
			link(t, filepath.Base(p)+".real", p)
		}, ""},
		{"missing", func(t *testing.T, p string) {}, "unable to find user agent: no matching entries in passwd file"},
		{"fifo", func(t *testing.T, p string) {
			if err := unix.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"directory", func(t *testing.T, p string) { os.Mkdir(p, 0o755) }, "not a regular file"},
		{"character device", func(t *testing.T, p string) { link(t, "/dev/zero", p) }, "not a regular file"},
		{"socket", func(t *testing.T, p string) {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Close(fd) })
			if err := unix.Bind(fd, &unix.SockaddrUnix{Name: p}); err != nil {
				t.Fatal(err)
			}
		}, "no such device or address"},
		{"proc file", func(t *testing.T, p string) { link(t, "/proc/self/environ", p) }, "kernel file"},
		{"sys file", func(t *testing.T, p string) {
			const f = "/sys/kernel/uevent_seqnum"
			if _, err := os.Stat(f); err != nil {
				testenv.Missing(t, "sysfs", err.Error())
			}
			link(t, f, p)
		}, "kernel file"},
		{"magic link to an open file", func(t *testing.T, p string) {
			link(t, fmt.Sprintf("/proc/self/fd/%d", held.Fd()), p)
		}, "too many levels of symbolic links"},
		{"magic link to the binary", func(t *testing.T, p string) { link(t, "/proc/self/exe", p) }, "too many levels of symbolic links"},
		{"huge", func(t *testing.T, p string) {
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(MaxFileSize + 1); err != nil {
				t.Fatal(err)
			}
		}, "more than the 16 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			etc := t.TempDir()
			p := filepath.Join(etc, "passwd")
			tc.make(t, p)
			u, err := Lookup("agent", etc)
			if tc.err == "" {
				if err != nil || u.Uid != 1000 || u.Home != "/home/agent" {
					t.Fatalf("Lookup = %+v, %v; want uid 1000, HOME /home/agent", u, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Lookup = %+v, %v; want an error with %q", u, err, tc.err)
			}
			if !strings.Contains(err.Error(), p) && !strings.HasPrefix(err.Error(), "unable to find user") {
				t.Errorf("error %q does not name %s", err, p)
			}
		})
	}
}

// The group file is read with the same care: a FIFO there is an error
// too, not a hang.
func TestLookupGroupFile(t *testing.T) {
	etc := t.TempDir()
	write(t, filepath.Join(etc, "passwd"), passwd)
	if err := unix.Mkfifo(filepath.Join(etc, "group"), 0o644); err != nil {
		t.Fatal(err)
	}
	if u, err := Lookup("1000", etc); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Lookup with a FIFO group file = %+v, %v; want an error", u, err)
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func TestMapped(t *testing.T) {
	m := "         0     100000      65536\n     65536 1000 1\n"
	for id, want := range map[int]bool{0: true, 65535: true, 65536: true, 65537: false, -1: false} {
		if got := Mapped(m, id); got != want {
			t.Errorf("Mapped(%d) = %v, want %v", id, got, want)
		}
	}
}
