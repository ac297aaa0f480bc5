package qemu

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"evals.si/internal/testenv"
)

// ext is a qcow2 header extension for craftQCOW2.
type ext struct {
	typ  uint32
	data []byte
}

// craft describes a qcow2 header for craftQCOW2.
type craft struct {
	version     uint32
	clusterBits uint32 // 0: 16
	incompat    uint64
	backing     string
	// backingOff and backingLen, when set, replace where the backing
	// name is said to be (by default right after the extensions).
	backingOff uint64
	backingLen uint32
	exts       []ext
	size       int // the file's size (0: 64 KiB)
}

// craftQCOW2 lays out a qcow2 header as docs/interop/qcow2.txt does: the
// header, the extensions (each padded to 8 bytes, then an end marker),
// then the backing file's name.
func craftQCOW2(c craft) []byte {
	if c.clusterBits == 0 {
		c.clusterBits = 16
	}
	if c.size == 0 {
		c.size = 64 << 10
	}
	hlen := 72
	if c.version >= 3 {
		hlen = 104
	}
	b := make([]byte, max(c.size, 4096))
	be := binary.BigEndian
	copy(b, qcow2Magic)
	be.PutUint32(b[4:], c.version)
	be.PutUint32(b[20:], c.clusterBits)
	be.PutUint64(b[24:], 1<<20)
	if c.version >= 3 {
		be.PutUint64(b[72:], c.incompat)
		be.PutUint32(b[96:], 4)
		be.PutUint32(b[100:], uint32(hlen))
	}
	off := hlen
	for _, e := range c.exts {
		be.PutUint32(b[off:], e.typ)
		be.PutUint32(b[off+4:], uint32(len(e.data)))
		copy(b[off+8:], e.data)
		off += 8 + (len(e.data)+7)&^7
	}
	off += 8 // the end marker, zeros
	if c.backing != "" {
		copy(b[off:], c.backing)
		be.PutUint64(b[8:], uint64(off))
		be.PutUint32(b[16:], uint32(len(c.backing)))
	}
	if c.backingOff != 0 || c.backingLen != 0 {
		be.PutUint64(b[8:], c.backingOff)
		be.PutUint32(b[16:], c.backingLen)
	}
	return b[:c.size]
}

func TestParseQCOW2(t *testing.T) {
	rawFmt := ext{extBackingFormat, []byte("raw")}
	cases := []struct {
		name    string
		file    []byte
		want    qcow2Header
		wantErr string
	}{
		{name: "v3 with backing", file: craftQCOW2(craft{version: 3, backing: "/cache/base.raw", exts: []ext{rawFmt}}),
			want: qcow2Header{Version: 3, Backing: "/cache/base.raw", BackingFormat: "raw"}},
		{name: "v2 with backing", file: craftQCOW2(craft{version: 2, backing: "base.qcow2", exts: []ext{{extBackingFormat, []byte("qcow2")}}}),
			want: qcow2Header{Version: 2, Backing: "base.qcow2", BackingFormat: "qcow2"}},
		{name: "no backing", file: craftQCOW2(craft{version: 3}), want: qcow2Header{Version: 3}},
		{name: "backing without format", file: craftQCOW2(craft{version: 3, backing: "/b"}),
			want: qcow2Header{Version: 3, Backing: "/b"}},
		{name: "unknown extensions skipped", file: craftQCOW2(craft{version: 3, backing: "/b", exts: []ext{{0x6803f857, make([]byte, 13)}, rawFmt}}),
			want: qcow2Header{Version: 3, Backing: "/b", BackingFormat: "raw"}},
		{name: "raw", file: bytes.Repeat([]byte{0}, 4096), wantErr: "no qcow2 magic"},
		{name: "short", file: qcow2Magic, wantErr: "shorter than a qcow2 header"},
		{name: "version 4", file: craftQCOW2(craft{version: 4}), wantErr: "version 4"},
		{name: "backing name past the file", file: craftQCOW2(craft{version: 3, size: 512, backingOff: 1000, backingLen: 20}), wantErr: "outside the header's first cluster and the file"},
		{name: "backing name past the first cluster", file: craftQCOW2(craft{version: 3, clusterBits: 9, size: 8192, backingOff: 600, backingLen: 20}), wantErr: "outside"},
		{name: "backing name inside the header", file: craftQCOW2(craft{version: 3, backingOff: 8, backingLen: 20}), wantErr: "outside"},
		{name: "backing name too long", file: craftQCOW2(craft{version: 3, backingOff: 200, backingLen: 2000}), wantErr: "want 1 to 1023"},
		{name: "backing offset with no length", file: craftQCOW2(craft{version: 3, backingOff: 200}), wantErr: "want 1 to 1023"},
		{name: "external data file bit", file: craftQCOW2(craft{version: 3, incompat: incompatDataFile}), wantErr: "external data file"},
		{name: "external data file extension", file: craftQCOW2(craft{version: 3, exts: []ext{{extDataFile, []byte("/etc/shadow")}}}), wantErr: "external data file"},
		{name: "extension past the end", file: craftQCOW2(craft{version: 3, clusterBits: 9, size: 512, exts: []ext{{extBackingFormat, make([]byte, 600)}}}), wantErr: "runs past"},
		{name: "cluster bits", file: craftQCOW2(craft{version: 3, clusterBits: 30}), wantErr: "cluster bits 30"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseQCOW2(bytes.NewReader(c.file), int64(len(c.file)))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("parseQCOW2 = %+v, %v; want an error containing %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("parseQCOW2 = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// TestParseQCOW2QemuImg reads the headers qemu-img writes, v2 and v3.
func TestParseQCOW2QemuImg(t *testing.T) {
	dir := t.TempDir()
	base := rawDisk(t, dir, "base.raw", 1<<20)
	for _, compat := range []string{"0.10", "1.1"} {
		p := filepath.Join(dir, "o"+compat+".qcow2")
		qemuImg(t, "create", "-q", "-f", "qcow2", "-o", "compat="+compat, "-b", base, "-F", "raw", p)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseQCOW2(bytes.NewReader(b), int64(len(b)))
		want := qcow2Header{Version: map[string]uint32{"0.10": 2, "1.1": 3}[compat], Backing: base, BackingFormat: "raw"}
		if err != nil || got != want {
			t.Errorf("compat %s: parseQCOW2 = %+v, %v; want %+v", compat, got, err, want)
		}
	}
}

func qemuImg(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		testenv.Missing(t, "qemu-img", "not on PATH (apt-get install qemu-utils)")
	}
	if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestOpenChain(t *testing.T) {
	dir := t.TempDir()
	base := rawDisk(t, dir, "base.raw", 1<<20)
	// qcow2 makes name.qcow2 over backing (of backingFmt; "" for none).
	qcow2 := func(name, backing, backingFmt string) string {
		p := filepath.Join(dir, name)
		if backing == "" {
			qemuImg(t, "create", "-q", "-f", "qcow2", p, "1M")
		} else {
			qemuImg(t, "create", "-q", "-f", "qcow2", "-b", backing, "-F", backingFmt, p)
		}
		return p
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := qcow2("plain.qcow2", "", "")
	over := qcow2("over.qcow2", base, "raw")
	top := qcow2("top.qcow2", over, "qcow2")
	// A relative name is the overlay's directory's, not the cwd's.
	rel := qcow2("rel.qcow2", "base.raw", "raw")
	// The loop: a over b, then b's header rewritten to name a.
	loopB := qcow2("loop-b.qcow2", "", "")
	loopA := qcow2("loop-a.qcow2", loopB, "qcow2")
	qemuImg(t, "rebase", "-u", "-b", loopA, "-F", "qcow2", loopB)
	// maxChain files: maxChain-1 qcow2 over the raw base; one more is
	// too deep.
	deep := base
	deepFmt := "raw"
	var deepest string
	for i := range maxChain {
		p := qcow2(fmt.Sprintf("deep%02d.qcow2", i), deep, deepFmt)
		if i == maxChain-2 {
			deepest = p
		}
		deep, deepFmt = p, "qcow2"
	}
	missing := qcow2("missing.qcow2", base, "raw")
	qemuImg(t, "rebase", "-u", "-b", filepath.Join(dir, "nonexistent.raw"), "-F", "raw", missing)
	device := filepath.Join(dir, "device.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-b", "/dev/null", "-F", "raw", "-u", device, "1M")
	dataFile := filepath.Join(dir, "datafile.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "data.raw"), dataFile, "1M")
	noFormat := write("noformat.qcow2", craftQCOW2(craft{version: 3, backing: base}))
	vmdk := write("vmdk.qcow2", craftQCOW2(craft{version: 3, backing: base, exts: []ext{{extBackingFormat, []byte("vmdk")}}}))
	jsonName := write("json.qcow2", craftQCOW2(craft{version: 3, backing: `json:{"file.filename":"/etc/shadow"}`, exts: []ext{{extBackingFormat, []byte("raw")}}}))
	pastEnd := write("pastend.qcow2", craftQCOW2(craft{version: 3, size: 512, backingOff: 1000, backingLen: 20}))

	type node struct {
		path, format string
		writable     bool
	}
	cases := []struct {
		name     string
		path     string
		format   string
		readOnly bool
		want     []node
		wantErr  string
	}{
		{name: "raw", path: base, format: "raw", want: []node{{base, "raw", true}}},
		{name: "raw read-only", path: base, format: "raw", readOnly: true, want: []node{{base, "raw", false}}},
		{name: "qcow2 without backing", path: plain, format: "qcow2", want: []node{{plain, "qcow2", true}}},
		{name: "qcow2 over raw", path: over, format: "qcow2", want: []node{{over, "qcow2", true}, {base, "raw", false}}},
		{name: "two levels, read-only", path: top, format: "qcow2", readOnly: true,
			want: []node{{top, "qcow2", false}, {over, "qcow2", false}, {base, "raw", false}}},
		{name: "relative backing", path: rel, format: "qcow2", want: []node{{rel, "qcow2", true}, {base, "raw", false}}},
		{name: "longest chain", path: deepest, format: "qcow2"},
		{name: "too deep", path: deep, format: "qcow2", wantErr: fmt.Sprintf("more than %d files", maxChain)},
		{name: "loop", path: loopA, format: "qcow2", wantErr: "loops"},
		{name: "missing backing file", path: missing, format: "qcow2", wantErr: "nonexistent.raw"},
		{name: "backing is a device", path: device, format: "qcow2", wantErr: "not a regular file"},
		{name: "external data file", path: dataFile, format: "qcow2", wantErr: "external data file"},
		{name: "backing format not recorded", path: noFormat, format: "qcow2", wantErr: "without its format"},
		{name: "backing format vmdk", path: vmdk, format: "qcow2", wantErr: `format "vmdk"`},
		{name: "json backing", path: jsonName, format: "qcow2", wantErr: "json: block graph"},
		{name: "header points past the file", path: pastEnd, format: "qcow2", wantErr: "outside"},
		{name: "raw given as qcow2", path: base, format: "qcow2", wantErr: "no qcow2 magic"},
		{name: "format vmdk", path: base, format: "vmdk", wantErr: `format "vmdk"`},
		{name: "missing disk", path: filepath.Join(dir, "nope"), format: "raw", wantErr: "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := openFDs(t)
			chain, err := openChain(c.path, c.format, c.readOnly)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					closeChain(chain)
					t.Fatalf("openChain = %d files, %v; want an error containing %q", len(chain), err, c.wantErr)
				}
				if after := openFDs(t); after != before {
					t.Fatalf("openChain failed leaving %d descriptors open", after-before)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer closeChain(chain)
			if c.name == "longest chain" {
				if len(chain) != maxChain {
					t.Fatalf("chain of %d files; want %d", len(chain), maxChain)
				}
				return
			}
			var got []node
			for _, f := range chain {
				got = append(got, node{f.path, f.format, f.writable})
				// The descriptor's access mode is what QEMU's fd set
				// matches its open against.
				fl, err := unixGetFL(f.f)
				if err != nil {
					t.Fatal(err)
				}
				if want := map[bool]int{true: os.O_RDWR, false: os.O_RDONLY}[f.writable]; fl&syscall.O_ACCMODE != want {
					t.Errorf("%s opened with access mode %#o; want %#o", f.path, fl&syscall.O_ACCMODE, want)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("chain = %v; want %v", got, c.want)
			}
		})
	}
}

func unixGetFL(f *os.File) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_GETFL, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
