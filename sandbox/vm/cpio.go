package vm

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"syscall"
)

// CPIOWriter writes a cpio archive in the "newc" format, the one the
// kernel unpacks as an initramfs. Entries have mtime 0 and owner root, so
// an archive of the same files is the same bytes. Parent directories are
// written on first use, so File("lib/modules/x.ko") needs no Dir calls.
type CPIOWriter struct {
	w    io.Writer
	ino  uint32
	dirs map[string]bool
	err  error
}

// NewCPIOWriter returns a writer of a cpio archive to w; Close writes the
// trailer.
func NewCPIOWriter(w io.Writer) *CPIOWriter {
	return &CPIOWriter{w: w, dirs: map[string]bool{".": true, "": true}}
}

// cpio newc mode bits for the file types (the same values as S_IF*).
const (
	cpioDir     = syscall.S_IFDIR
	cpioRegular = syscall.S_IFREG
	cpioSymlink = syscall.S_IFLNK
	cpioChar    = syscall.S_IFCHR
)

// Dir writes a directory (and any parent not yet written).
func (c *CPIOWriter) Dir(name string, perm fs.FileMode) error {
	name, err := c.clean(name)
	if err != nil {
		return err
	}
	if c.dirs[name] {
		return nil
	}
	if err := c.parents(name); err != nil {
		return err
	}
	c.dirs[name] = true
	return c.header(name, cpioDir|uint32(perm.Perm())|specialBits(perm), 0, 0, 0)
}

// File writes a regular file of size bytes read from r.
func (c *CPIOWriter) File(name string, perm fs.FileMode, size int64, r io.Reader) error {
	name, err := c.clean(name)
	if err != nil {
		return err
	}
	if size < 0 || size > 0xffffffff {
		return fmt.Errorf("cpio: %s: size %d does not fit the newc format (4 GiB at most)", name, size)
	}
	if err := c.parents(name); err != nil {
		return err
	}
	if err := c.header(name, cpioRegular|uint32(perm.Perm())|specialBits(perm), uint32(size), 0, 0); err != nil {
		return err
	}
	n, err := io.CopyN(c.w, r, size)
	if err != nil {
		c.err = fmt.Errorf("cpio: %s: wrote %d of %d bytes: %w", name, n, size, err)
		return c.err
	}
	return c.pad(size)
}

// Symlink writes a symbolic link to target.
func (c *CPIOWriter) Symlink(name, target string) error {
	name, err := c.clean(name)
	if err != nil {
		return err
	}
	if err := c.parents(name); err != nil {
		return err
	}
	if err := c.header(name, cpioSymlink|0o777, uint32(len(target)), 0, 0); err != nil {
		return err
	}
	if _, err := io.WriteString(c.w, target); err != nil {
		c.err = fmt.Errorf("cpio: %s: %w", name, err)
		return c.err
	}
	return c.pad(int64(len(target)))
}

// CharDevice writes a character device node (the initramfs's /dev/console,
// which the kernel opens for init's stdin, stdout and stderr before init
// can mount devtmpfs).
func (c *CPIOWriter) CharDevice(name string, perm fs.FileMode, major, minor uint32) error {
	name, err := c.clean(name)
	if err != nil {
		return err
	}
	if err := c.parents(name); err != nil {
		return err
	}
	return c.header(name, cpioChar|uint32(perm.Perm()), 0, major, minor)
}

// Close writes the trailer entry. It does not close the underlying writer.
func (c *CPIOWriter) Close() error {
	if c.err != nil {
		return c.err
	}
	// The trailer is a header with nlink 1 and no inode, as GNU cpio
	// writes it.
	c.ino = 0
	if err := c.writeHeader("TRAILER!!!", 0, 0, 0, 0, 1, 0); err != nil {
		return err
	}
	c.err = fmt.Errorf("cpio: archive already closed")
	return nil
}

// clean makes name relative (cpio members are relative to the archive's
// root) and refuses names that would leave it.
func (c *CPIOWriter) clean(name string) (string, error) {
	if c.err != nil {
		return "", c.err
	}
	n := path.Clean("/" + name)[1:]
	if n == "" || strings.Contains(name, "\x00") {
		return "", fmt.Errorf("cpio: %q is not a file name inside the archive", name)
	}
	return n, nil
}

// parents writes the directories above name that are not yet written, mode
// 0755.
func (c *CPIOWriter) parents(name string) error {
	d := path.Dir(name)
	if c.dirs[d] {
		return nil
	}
	return c.Dir(d, 0o755)
}

func (c *CPIOWriter) header(name string, mode, size, rmajor, rminor uint32) error {
	c.ino++
	nlink := uint32(1)
	if mode&syscall.S_IFMT == cpioDir {
		nlink = 2
	}
	return c.writeHeader(name, mode, size, rmajor, rminor, nlink, c.ino)
}

// writeHeader writes one newc header: the magic 070701, thirteen 8-digit
// hex fields, then the NUL-terminated name padded to a multiple of 4 bytes
// counted from the header's start.
func (c *CPIOWriter) writeHeader(name string, mode, size, rmajor, rminor, nlink, ino uint32) error {
	h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, rmajor, rminor, len(name)+1, 0)
	h += name + "\x00"
	if r := len(h) % 4; r != 0 {
		h += strings.Repeat("\x00", 4-r)
	}
	if _, err := io.WriteString(c.w, h); err != nil {
		c.err = fmt.Errorf("cpio: %s: %w", name, err)
		return c.err
	}
	return nil
}

// pad writes the NULs that bring n bytes of data to a multiple of 4.
func (c *CPIOWriter) pad(n int64) error {
	if r := n % 4; r != 0 {
		if _, err := c.w.Write(make([]byte, 4-r)); err != nil {
			c.err = fmt.Errorf("cpio: %w", err)
			return c.err
		}
	}
	return nil
}

// specialBits maps fs.FileMode's setuid, setgid and sticky flags to the
// mode bits cpio stores.
func specialBits(m fs.FileMode) uint32 {
	var b uint32
	if m&fs.ModeSetuid != 0 {
		b |= syscall.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		b |= syscall.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		b |= syscall.S_ISVTX
	}
	return b
}
