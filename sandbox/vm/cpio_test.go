package vm

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// cpioEntry is one member of a newc archive, as readCPIO parses it.
type cpioEntry struct {
	Name                string
	Ino, Mode, UID, GID uint32
	Nlink, Mtime        uint32
	RMajor, RMinor      uint32
	Data                string
}

// readCPIO is an independent newc reader (the format as the kernel's
// init/initramfs.c reads it): it checks the magic, the 4-byte alignment of
// names and data, and that the archive ends with TRAILER!!! and nothing
// but padding after it.
func readCPIO(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	for {
		if off%4 != 0 {
			t.Fatalf("header at %d is not 4-byte aligned", off)
		}
		if len(b) < off+110 {
			t.Fatalf("archive ends at %d inside a header, without a trailer", len(b))
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		var f [13]uint32
		for i := range f {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				t.Fatalf("field %d of header at %d: %v", i, off, err)
			}
			f[i] = uint32(v)
		}
		nameSize, size := int(f[11]), int(f[6])
		nameEnd := off + 110 + nameSize
		if b[nameEnd-1] != 0 {
			t.Fatalf("name at %d is not NUL-terminated", off)
		}
		name := string(b[off+110 : nameEnd-1])
		dataOff := (nameEnd + 3) &^ 3
		for _, c := range b[nameEnd:dataOff] {
			if c != 0 {
				t.Fatalf("name padding of %s is not NULs", name)
			}
		}
		if name == "TRAILER!!!" {
			for _, c := range b[dataOff:] {
				if c != 0 {
					t.Fatalf("bytes after the trailer")
				}
			}
			return out
		}
		out = append(out, cpioEntry{Name: name, Ino: f[0], Mode: f[1], UID: f[2], GID: f[3], Nlink: f[4], Mtime: f[5],
			RMajor: f[9], RMinor: f[10], Data: string(b[dataOff : dataOff+size])})
		off = (dataOff + size + 3) &^ 3
	}
}

func TestCPIORoundTrip(t *testing.T) {
	type op func(c *CPIOWriter) error
	file := func(name string, perm fs.FileMode, data string) op {
		return func(c *CPIOWriter) error { return c.File(name, perm, int64(len(data)), strings.NewReader(data)) }
	}
	tests := []struct {
		name string
		ops  []op
		want []string // name mode(octal) data, per entry
	}{
		{
			name: "parents are written once, before their files",
			ops:  []op{file("lib/modules/a.ko", 0o644, "abc"), file("/lib/modules/b.ko", 0o644, "")},
			want: []string{"lib 40755 ", "lib/modules 40755 ", "lib/modules/a.ko 100644 abc", "lib/modules/b.ko 100644 "},
		},
		{
			name: "data of every length modulo 4 stays aligned",
			ops:  []op{file("a", 0o600, "1"), file("b", 0o600, "12"), file("c", 0o600, "123"), file("d", 0o600, "1234"), file("e", 0o755, "12345")},
			want: []string{"a 100600 1", "b 100600 12", "c 100600 123", "d 100600 1234", "e 100755 12345"},
		},
		{
			name: "directories, special bits, symlinks and devices",
			ops: []op{
				func(c *CPIOWriter) error { return c.Dir("tmp", 0o777|fs.ModeSticky) },
				file("bin/su", 0o755|fs.ModeSetuid, "x"),
				func(c *CPIOWriter) error { return c.Symlink("bin/sh", "busybox") },
				func(c *CPIOWriter) error { return c.CharDevice("dev/console", 0o600, 5, 1) },
				func(c *CPIOWriter) error { return c.Dir("tmp", 0o755) }, // already written: no second entry
			},
			want: []string{"tmp 41777 ", "bin 40755 ", "bin/su 104755 x", "bin/sh 120777 busybox", "dev 40755 ", "dev/console 20600 "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			c := NewCPIOWriter(&buf)
			for _, o := range tt.ops {
				if err := o(c); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			entries := readCPIO(t, buf.Bytes())
			var got []string
			inos := map[uint32]bool{}
			for _, e := range entries {
				got = append(got, fmt.Sprintf("%s %o %s", e.Name, e.Mode, e.Data))
				if inos[e.Ino] || e.Ino == 0 {
					t.Errorf("%s: inode %d is zero or reused", e.Name, e.Ino)
				}
				inos[e.Ino] = true
				if e.UID != 0 || e.GID != 0 || e.Mtime != 0 {
					t.Errorf("%s: owner %d:%d mtime %d, want 0:0 and 0 (reproducible archives)", e.Name, e.UID, e.GID, e.Mtime)
				}
				if e.Mode&syscall.S_IFMT == syscall.S_IFCHR && (e.RMajor != 5 || e.RMinor != 1) {
					t.Errorf("%s: device %d:%d, want 5:1", e.Name, e.RMajor, e.RMinor)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestCPIOErrors(t *testing.T) {
	tests := []struct {
		name string
		op   func(c *CPIOWriter) error
		want string
	}{
		{"empty name", func(c *CPIOWriter) error { return c.Dir("/", 0o755) }, "not a file name"},
		{"short reader", func(c *CPIOWriter) error { return c.File("f", 0o644, 10, strings.NewReader("abc")) }, "wrote 3 of 10 bytes"},
		{"too large", func(c *CPIOWriter) error { return c.File("f", 0o644, 1<<32, strings.NewReader("")) }, "does not fit"},
		{"write after close", func(c *CPIOWriter) error { c.Close(); return c.Dir("d", 0o755) }, "already closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.op(NewCPIOWriter(io.Discard))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
