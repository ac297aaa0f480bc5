package sandbox

import (
	"fmt"
	"syscall"
)

// MaxReadFile caps what ReadFile returns on every rung, as Inspect caps
// read_file: a sandbox's file can be as large as its disk, and the engine
// holds what it reads in memory. A larger file is an error naming the cap.
const MaxReadFile = 64 << 20

// NotRegular is every rung's refusal of a file operation on something other
// than a regular file (kind: "directory", "FIFO", ...): a FIFO would block
// the engine, a device or socket has side effects.
func NotRegular(kind string) error {
	return fmt.Errorf("it is a %s, not a regular file: file operations read and write regular files only", kind)
}

// FileKind names the file type in a stat(2) mode, for NotRegular.
func FileKind(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return "directory"
	case syscall.S_IFIFO:
		return "FIFO"
	case syscall.S_IFSOCK:
		return "socket"
	case syscall.S_IFCHR:
		return "character device"
	case syscall.S_IFBLK:
		return "block device"
	case syscall.S_IFLNK:
		return "symlink"
	}
	return "special file"
}
