package qemu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A disk's backing chain is read here, on the host, from the qcow2
// headers, and every file of it is opened by the engine and handed to QEMU
// as a descriptor: QEMU, running as its own unprivileged user, cannot open
// the cache's files by path (they may be root's, 0600, in 0700
// directories), and must not open the paths a qcow2 header names at all:
// the header of a machine's writable overlay is QEMU's to rewrite, and a
// snapshot layer keeps that overlay as the next machines' backing file.

// maxChain is the most files a disk's chain may have, its top included:
// a snapshot layer adds one or two qcow2 files over its parent, and a
// chain longer than this is a loop gone unnoticed or a header that lies.
const maxChain = 16

// qcow2Magic begins every qcow2 file: "QFI\xfb".
var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

// Header extension types (docs/interop/qcow2.txt).
const (
	extEnd           = 0x00000000
	extBackingFormat = 0xe2792aca
	extDataFile      = 0x44415441
)

// incompatDataFile is the incompatible-feature bit of a qcow2 whose data
// lives in another file, named by path in a header extension.
const incompatDataFile = 1 << 2

// qcow2Header is what the chain needs from a qcow2 header.
type qcow2Header struct {
	Version uint32
	// Backing is the backing file's name as stored (empty: none);
	// BackingFormat its format, from the backing-format extension.
	Backing, BackingFormat string
}

// parseQCOW2 reads the header of the qcow2 file r of size bytes: its
// version, its backing file's name and format. It refuses what QEMU would
// resolve by a path this package does not control (an external data
// file) and headers whose fields point outside the file or the first
// cluster, where QEMU itself would refuse them.
func parseQCOW2(r io.ReaderAt, size int64) (qcow2Header, error) {
	var h [104]byte
	n, err := r.ReadAt(h[:], 0)
	if n < 72 {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("%d bytes, shorter than a qcow2 header", n)
		}
		return qcow2Header{}, err
	}
	if !bytes.Equal(h[:4], qcow2Magic) {
		return qcow2Header{}, fmt.Errorf("no qcow2 magic (starts %q)", h[:4])
	}
	be := binary.BigEndian
	hdr := qcow2Header{Version: be.Uint32(h[4:])}
	backingOff, backingLen := be.Uint64(h[8:]), be.Uint32(h[16:])
	clusterBits := be.Uint32(h[20:])
	headerLen := uint64(72)
	switch hdr.Version {
	case 2:
	case 3:
		if n < 104 {
			return qcow2Header{}, fmt.Errorf("a version 3 header of %d bytes, under 104", n)
		}
		if be.Uint64(h[72:])&incompatDataFile != 0 {
			return qcow2Header{}, errors.New("its data is in an external data file, which QEMU would open by the path the header names: convert it to a plain qcow2 (qemu-img convert)")
		}
		headerLen = uint64(be.Uint32(h[100:]))
		if headerLen < 104 {
			return qcow2Header{}, fmt.Errorf("header length %d, under 104", headerLen)
		}
	default:
		return qcow2Header{}, fmt.Errorf("qcow2 version %d: want 2 or 3", hdr.Version)
	}
	if clusterBits < 9 || clusterBits > 21 {
		return qcow2Header{}, fmt.Errorf("cluster bits %d: want 9 to 21", clusterBits)
	}
	// QEMU reads the header, its extensions and the backing file's name
	// from the first cluster only.
	limit := min(uint64(1)<<clusterBits, uint64(max(size, 0)))
	if headerLen > limit {
		return qcow2Header{}, fmt.Errorf("header length %d is past the first cluster or the file's end (%d bytes)", headerLen, limit)
	}
	if backingOff != 0 || backingLen != 0 {
		if backingLen == 0 || backingLen > 1023 {
			return qcow2Header{}, fmt.Errorf("backing file name of %d bytes: want 1 to 1023", backingLen)
		}
		if backingOff < headerLen || backingOff > limit || uint64(backingLen) > limit-backingOff {
			return qcow2Header{}, fmt.Errorf("backing file name at %d+%d is outside the header's first cluster and the file (%d bytes)", backingOff, backingLen, limit)
		}
		name := make([]byte, backingLen)
		if _, err := r.ReadAt(name, int64(backingOff)); err != nil {
			return qcow2Header{}, fmt.Errorf("reading the backing file name: %w", err)
		}
		if bytes.IndexByte(name, 0) >= 0 {
			return qcow2Header{}, errors.New("the backing file name holds a NUL byte")
		}
		hdr.Backing = string(name)
	}
	// The extensions follow the header up to the backing file's name
	// (or the first cluster's end), as QEMU reads them.
	end := limit
	if backingOff != 0 {
		end = backingOff
	}
	for off := headerLen; off+8 <= end; {
		var e [8]byte
		if _, err := r.ReadAt(e[:], int64(off)); err != nil {
			return qcow2Header{}, fmt.Errorf("reading the header extension at %d: %w", off, err)
		}
		typ, l := be.Uint32(e[:]), uint64(be.Uint32(e[4:]))
		if typ == extEnd {
			break
		}
		if l > end-off-8 {
			return qcow2Header{}, fmt.Errorf("header extension %#x at %d of %d bytes runs past %d", typ, off, l, end)
		}
		switch typ {
		case extDataFile:
			return qcow2Header{}, errors.New("it names an external data file, which QEMU would open by path: convert it to a plain qcow2 (qemu-img convert)")
		case extBackingFormat:
			f := make([]byte, l)
			if _, err := r.ReadAt(f, int64(off+8)); err != nil {
				return qcow2Header{}, fmt.Errorf("reading the backing format: %w", err)
			}
			hdr.BackingFormat = string(f)
		}
		off += 8 + (l+7)&^7
	}
	return hdr, nil
}

// chainFile is one file of a disk's chain, opened by the engine.
type chainFile struct {
	path   string
	format string // "raw" or "qcow2"
	f      *os.File
	// writable: opened read-write, the top of a disk that is not
	// read-only; every backing file is read-only.
	writable bool
}

// openChain opens path, a disk of format ("raw" or "qcow2"), and every
// backing file its qcow2 headers name, top first: the top read-write
// unless readOnly, the rest read-only. A raw file ends the chain. It
// refuses a qcow2 whose backing format is not recorded (QEMU would probe
// it, and a raw disk whose guest wrote a qcow2 header would then name a
// host file), formats other than raw and qcow2, backing files that are
// not regular files, loops, and chains of more than maxChain files. On
// error nothing stays open.
func openChain(path, format string, readOnly bool) (_ []chainFile, err error) {
	var chain []chainFile
	defer func() {
		if err != nil {
			closeChain(chain)
		}
	}()
	type fileID struct{ dev, ino uint64 }
	seen := map[fileID]string{}
	disk := path
	for {
		top := len(chain) == 0
		if len(chain) == maxChain {
			return nil, fmt.Errorf("disk %s: its backing chain has more than %d files (the last reached: %s)", disk, maxChain, path)
		}
		if format != "raw" && format != "qcow2" {
			return nil, fmt.Errorf("disk %s: %s is of format %q: the qemu rung reads raw and qcow2 only", disk, path, format)
		}
		cf := chainFile{path: path, format: format, writable: top && !readOnly}
		flag := os.O_RDONLY
		if cf.writable {
			flag = os.O_RDWR
		}
		// O_NOFOLLOW would refuse the cache's own symlinks; a backing
		// name is resolved like QEMU resolves it, then checked for what
		// it opened.
		f, err := os.OpenFile(path, flag, 0)
		if err != nil {
			if top {
				return nil, fmt.Errorf("disk %s: %w", path, err)
			}
			return nil, fmt.Errorf("disk %s: its backing file: %w", disk, err)
		}
		cf.f = f
		chain = append(chain, cf)
		st, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("disk %s: %w", path, err)
		}
		sys, _ := st.Sys().(*syscall.Stat_t)
		switch {
		case st.Mode().IsRegular():
		case top && st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0:
			// A block device is a raw disk the caller chose.
		default:
			return nil, fmt.Errorf("disk %s: %s is a %s, not a regular file (a backing file must be one)", disk, path, st.Mode().Type())
		}
		if sys != nil {
			id := fileID{uint64(sys.Dev), sys.Ino}
			if prev, ok := seen[id]; ok {
				return nil, fmt.Errorf("disk %s: its backing chain loops: %s is %s again", disk, path, prev)
			}
			seen[id] = path
		}
		if format == "raw" {
			return chain, nil
		}
		hdr, err := parseQCOW2(f, st.Size())
		if err != nil {
			return nil, fmt.Errorf("disk %s: qcow2 header of %s: %w", disk, path, err)
		}
		if hdr.Backing == "" {
			return chain, nil
		}
		if hdr.BackingFormat == "" {
			return nil, fmt.Errorf("disk %s: %s names its backing file %s without its format, which QEMU would guess: recreate it with qemu-img create -F raw|qcow2", disk, path, hdr.Backing)
		}
		if strings.HasPrefix(hdr.Backing, "json:") {
			return nil, fmt.Errorf("disk %s: %s's backing file is a json: block graph, not a file", disk, path)
		}
		next := hdr.Backing
		if !filepath.IsAbs(next) {
			// As QEMU does: relative to the directory of the file
			// that names it.
			next = filepath.Join(filepath.Dir(path), next)
		}
		path, format = next, hdr.BackingFormat
	}
}

func closeChain(chain []chainFile) {
	for _, c := range chain {
		if c.f != nil {
			c.f.Close()
		}
	}
}
