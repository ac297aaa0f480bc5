package firecracker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// Names in a machine's working directory. Firecracker gets them as paths
// relative to its working directory, so a snapshot, which records the
// drives' and the vsock socket's paths as given, resolves them in the
// directory of whichever process restores it.
const (
	apiSockName = "fc.sock"
	vsockName   = "v.sock"
	kernelName  = "vmlinux"
	initrdName  = "initrd"
	consoleName = "console.log"
)

func driveName(i int) string { return "drive" + strconv.Itoa(i) }

// maxSunPath is the longest path a unix socket address holds (sun_path is
// 108 bytes with its NUL).
const maxSunPath = 107

// workdir is where one Firecracker process runs: the directory it sees as
// its working directory, holding its sockets and links to its files.
// Without the jailer it is the machine's directory; with it, the jail's
// root, which Firecracker sees as "/".
type workdir struct {
	// root is the directory's path on the host.
	root string
	// execFile is the firecracker binary, resolved.
	execFile string
	// jailed: through the jailer, as uid:gid, in jailDir/root.
	jailed  bool
	id      string
	jailDir string
	// chrootBase is the jailer's --chroot-base-dir: jailDir is
	// chrootBase/<binary's name>/id.
	chrootBase string
	uid, gid   int
}

// host is the host's path of a name in the working directory.
func (w *workdir) host(name string) string { return filepath.Join(w.root, name) }

// newWorkdir resolves the binary and, with the jailer, makes the jail's
// root (the jailer creates it only when missing, so the files linked in
// beforehand stay).
func (v *VMM) newWorkdir(dir string) (*workdir, error) {
	bin, err := exec.LookPath(v.opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("firecracker binary %q not found (%w): install it or set its path in the config", v.opts.Binary, err)
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return nil, fmt.Errorf("firecracker binary %q: %w", v.opts.Binary, err)
	}
	if v.opts.Jailer == "" {
		root, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("machine directory %q: %w", dir, err)
		}
		return &workdir{root: root, execFile: bin}, nil
	}
	if err := v.checkJailerConfig(); err != nil {
		return nil, err
	}
	// The jailer names the jail after the binary's file name once
	// symlinks are resolved (it canonicalizes --exec-file).
	canon, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return nil, fmt.Errorf("firecracker binary %s: %w", bin, err)
	}
	id, err := jailID()
	if err != nil {
		return nil, err
	}
	base, err := filepath.Abs(v.opts.ChrootBase)
	if err != nil {
		return nil, fmt.Errorf("jailer chroot base %q: %w", v.opts.ChrootBase, err)
	}
	w := &workdir{
		execFile: canon, jailed: true, id: id,
		jailDir:    filepath.Join(base, filepath.Base(canon), id),
		chrootBase: base,
		uid:        v.opts.UID, gid: v.opts.GID,
	}
	w.root = filepath.Join(w.jailDir, "root")
	if err := os.MkdirAll(w.root, 0o755); err != nil {
		return nil, fmt.Errorf("making the jail %s: %w (is the chroot base %s writable?)", w.root, err, base)
	}
	return w, nil
}

// jailID is a jailer --id: letters, digits and hyphens, at most 64.
func jailID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("jail id: %w", err)
	}
	return "evalsi-" + hex.EncodeToString(b[:]), nil
}

func (v *VMM) checkJailerConfig() error {
	var errs []error
	if uid := os.Geteuid(); uid != 0 {
		errs = append(errs, fmt.Errorf("the jailer needs root, and the engine runs as uid %d: run it as root or unset the jailer", uid))
	}
	if v.opts.UID <= 0 || v.opts.GID <= 0 {
		errs = append(errs, fmt.Errorf("the jailer needs the unprivileged uid and gid to run Firecracker as (got %d:%d; root is refused)", v.opts.UID, v.opts.GID))
	}
	return errors.Join(errs...)
}

// jailerArgs is the jailer's command line. Without --daemonize and
// --new-pid-ns the jailer execs Firecracker in its own process, so the
// process the VMM started is Firecracker, its stdout (the serial console)
// is console.log, and killing it stops the VM.
func (w *workdir) jailerArgs() []string {
	return []string{
		"--id", w.id,
		"--exec-file", w.execFile,
		"--uid", strconv.Itoa(w.uid),
		"--gid", strconv.Itoa(w.gid),
		"--chroot-base-dir", w.chrootBase,
		"--",
		// Inside the jail, "/" is w.root.
		"--api-sock", "/" + apiSockName,
	}
}

// place makes src reachable as name in the working directory and returns
// the path to give Firecracker. Without the jailer it is a symlink; a
// jailed Firecracker cannot follow a link out of its chroot, so there it
// is a hard link, or a copy for a read-only file on another filesystem (a
// copy of a writable disk would hide the guest's writes from the caller,
// so that is an error). Writable files are given to the jail's user.
func (w *workdir) place(src, name string, writable bool) (string, error) {
	abs, err := filepath.Abs(src)
	if err != nil {
		return "", fmt.Errorf("%s: %w", src, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return "", err
	}
	dst := w.host(name)
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("replacing %s: %w", dst, err)
	}
	if !w.jailed {
		if err := os.Symlink(abs, dst); err != nil {
			return "", fmt.Errorf("linking %s into the machine directory: %w", abs, err)
		}
		return name, nil
	}
	err = os.Link(abs, dst)
	if errors.Is(err, syscall.EXDEV) && !writable {
		err = copyFile(abs, dst)
	}
	if err != nil {
		if errors.Is(err, syscall.EXDEV) {
			return "", fmt.Errorf("hard-linking %s into the jail %s: they are on different filesystems; put the jailer's chroot base on the filesystem of the machines' disks", abs, w.root)
		}
		return "", fmt.Errorf("hard-linking %s into the jail %s: %w", abs, w.root, err)
	}
	if writable {
		if err := os.Chown(dst, w.uid, w.gid); err != nil {
			return "", fmt.Errorf("giving %s to the jail's user %d:%d: %w", abs, w.uid, w.gid, err)
		}
	}
	return name, nil
}

// remove deletes the jail (the links in it, not what they point to).
func (w *workdir) remove() error {
	if w.jailDir == "" {
		return nil
	}
	if err := os.RemoveAll(w.jailDir); err != nil {
		return fmt.Errorf("removing the jail %s: %w", w.jailDir, err)
	}
	return nil
}

// moveFile renames src to dst, copying across filesystems. src is in a
// directory the (jailed, untrusted) VMM could write: it must be a regular
// file itself, never a link the VMM planted to a host file.
func moveFile(src, dst string) error {
	if st, err := os.Lstat(src); err != nil {
		return fmt.Errorf("moving %s: %w", src, err)
	} else if !st.Mode().IsRegular() {
		return fmt.Errorf("moving %s: not a regular file (%s): refused", src, st.Mode().Type())
	}
	err := os.Rename(src, dst)
	if errors.Is(err, syscall.EXDEV) {
		if err = copyFile(src, dst); err == nil {
			err = os.Remove(src)
		}
	}
	if err != nil {
		return fmt.Errorf("moving %s to %s: %w", src, dst, err)
	}
	return nil
}

func copyFile(src, dst string) (err error) {
	// O_NOFOLLOW and a check on the descriptor: what is copied is the
	// regular file at src, never what a link there names.
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil {
		return err
	} else if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file: refused", src)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = io.Copy(out, in)
	return err
}
