package engine

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"evals.si/sandbox"
)

// userSandbox is the agent's view of the trial's sandbox when the task
// names a user (environment.user, or the image's USER): its commands run
// as that user unless they name one, and its file reads and writes go
// through commands run as that user, so a non-root agent cannot read or
// write through read_file/write_file what it could not with cat. The
// engine's own calls (diff capture, the repository's base, checker files)
// use the sandbox underneath, as root.
type userSandbox struct {
	sandbox.Sandbox
	user string
	// files routes ReadFile and WriteFile through Exec; false when the
	// agent runs as root, whose file operations the rung serves itself.
	files bool
}

// agentView wraps sb for the agent: user is environment.user ("" for the
// sandbox's default user), imageUser the image's USER (the default).
func agentView(sb sandbox.Sandbox, user, imageUser string) sandbox.Sandbox {
	eff := user
	if eff == "" {
		eff = imageUser
	}
	if user == "" && isRoot(eff) {
		return sb
	}
	return userSandbox{Sandbox: sb, user: user, files: !isRoot(eff)}
}

// isRoot reports whether a user spec names root ("", root, 0, with any
// group): its file operations need no user of their own.
func isRoot(user string) bool {
	name, _, _ := strings.Cut(user, ":")
	return name == "" || name == "root" || name == "0"
}

func (s userSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if req.User == "" {
		req.User = s.user
	}
	return s.Sandbox.Exec(ctx, req)
}

// StartService runs as the agent's user too, like its commands.
func (s userSandbox) StartService(ctx context.Context, req sandbox.ExecRequest) (sandbox.Service, error) {
	if req.User == "" {
		req.User = s.user
	}
	return s.Sandbox.StartService(ctx, req)
}

// fileOpTimeout bounds one file read or write run as the agent's user.
const fileOpTimeout = 2 * time.Minute

// Exit codes of the file scripts for the refusals that have an error of
// their own; anything else nonzero is reported with the script's stderr.
const (
	exitNotExist   = 70
	exitNotRegular = 71
	exitDenied     = 72
)

// kindCheck refuses what is not a regular file (after symlinks), as every
// rung's ReadFile and WriteFile do: a FIFO would block, a device has side
// effects.
const kindCheck = `if [ -d "$p" ]; then echo directory >&2; exit 71; fi
if [ -p "$p" ]; then echo FIFO >&2; exit 71; fi
if [ -S "$p" ]; then echo socket >&2; exit 71; fi
if [ -c "$p" ]; then echo "character device" >&2; exit 71; fi
if [ -b "$p" ]; then echo "block device" >&2; exit 71; fi
`

const readScript = `p=$1
[ -e "$p" ] || exit 70
` + kindCheck + `[ -r "$p" ] || exit 72
exec cat -- "$p"
`

// writeScript writes stdin to $1; a file it creates gets mode $2 and
// missing parent directories are made, as WriteFile does.
const writeScript = `p=$1
if [ -e "$p" ]; then
` + kindCheck + `  [ -w "$p" ] || exit 72
  exec cat > "$p"
fi
case "$p" in
*/*) d=${p%/*}; mkdir -p -- "${d:-/}" || exit 1 ;;
esac
cat > "$p" || exit 1
chmod "$2" -- "$p"
`

func (s userSandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if !s.files {
		return s.Sandbox.ReadFile(ctx, p)
	}
	res, err := s.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", readScript, "sh", p}, Timeout: fileOpTimeout, OutputLimit: sandbox.MaxReadFile + 1})
	if err != nil {
		return nil, fmt.Errorf("reading %s as %s: %w", p, userName(s.user), err)
	}
	if err := s.fileErr("read", p, res); err != nil {
		return nil, err
	}
	if len(res.Stdout) > sandbox.MaxReadFile {
		return nil, &fs.PathError{Op: "read", Path: p, Err: fmt.Errorf("it is larger than the %d MiB read cap", sandbox.MaxReadFile>>20)}
	}
	return res.Stdout, nil
}

func (s userSandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if !s.files {
		return s.Sandbox.WriteFile(ctx, p, data, mode)
	}
	res, err := s.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", writeScript, "sh", p, fmt.Sprintf("%o", mode.Perm())}, Stdin: data, Timeout: fileOpTimeout})
	if err != nil {
		return fmt.Errorf("writing %s as %s: %w", p, userName(s.user), err)
	}
	return s.fileErr("write", p, res)
}

// fileErr turns a file script's result into the error a rung's file
// operation would give.
func (s userSandbox) fileErr(op, p string, res sandbox.ExecResult) error {
	msg := strings.TrimSpace(string(res.Stderr))
	switch {
	case res.TimedOut:
		return &fs.PathError{Op: op, Path: p, Err: fmt.Errorf("timed out after %s", fileOpTimeout)}
	case res.ExitCode == 0:
		return nil
	case res.ExitCode == exitNotExist:
		return &fs.PathError{Op: op, Path: p, Err: fs.ErrNotExist}
	case res.ExitCode == exitNotRegular:
		return &fs.PathError{Op: op, Path: p, Err: sandbox.NotRegular(msg)}
	case res.ExitCode == exitDenied || strings.Contains(msg, "Permission denied"):
		return &fs.PathError{Op: op, Path: p, Err: fmt.Errorf("%w (the agent runs as %s)", fs.ErrPermission, userName(s.user))}
	}
	return &fs.PathError{Op: op, Path: p, Err: fmt.Errorf("exit %d as %s: %s", res.ExitCode, userName(s.user), orNone(msg))}
}
