package external

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"evals.si/harness/harnesspb"
	"evals.si/python"
)

// passEnv lists the environment variables a started harness inherits from
// the worker, besides $EVALSI_HARNESS_SOCKET (and PYTHONPATH for the python
// form). Everything else, provider keys first of all, stays with the
// worker: the harness reaches the model through Worker.Chat. The GO*
// variables let a command such as `go run` find its toolchain and caches.
var passEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM",
	"GOROOT", "GOPATH", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOPROXY", "GONOSUMDB", "GONOSUMCHECK",
	"GOSUMDB", "GOTOOLCHAIN", "GOPRIVATE", "CGO_ENABLED",
}

// process is a harness the worker started.
type process struct {
	cmd    *exec.Cmd
	dir    string // private temporary directory: the socket, the shim
	socket string
	log    *slog.Logger

	exited chan struct{}
	err    error // the exit status, once exited is closed

	out *tailBuffer
}

func harnessEnv(o Options, extra ...string) []string {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var env []string
	for _, k := range passEnv {
		if v := getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

// privateDir makes a 0700 directory for the socket: only the worker's user
// can reach the harness or the worker's callback service.
func privateDir(prefix string) (string, error) {
	// Unix socket paths are short (108 bytes): keep them under the system's
	// temporary directory, not a deep state directory.
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("creating a directory for the harness socket: %w", err)
	}
	return dir, os.Chmod(dir, 0o700)
}

func startCommand(o Options) (*process, error) {
	dir, err := privateDir("evalsi-harness-")
	if err != nil {
		return nil, err
	}
	argv := append([]string{}, o.External.Command...)
	if strings.Contains(argv[0], "/") && !filepath.IsAbs(argv[0]) && o.Dir != "" {
		// A relative program path is relative to the spec, like every other
		// path in it.
		argv[0] = filepath.Join(o.Dir, argv[0])
	}
	socket := filepath.Join(dir, "harness.sock")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = o.Dir
	cmd.Env = harnessEnv(o, harnesspb.SocketEnv+"="+socket)
	p, err := start(cmd, dir, socket, o.Logger.With("harness", "external", "command", argv[0]))
	if err != nil {
		return nil, fmt.Errorf("harness.external.command: starting %q: %w", strings.Join(o.External.Command, " "), err)
	}
	return p, nil
}

func startPython(o Options) (*process, error) {
	module, class, ok := strings.Cut(o.External.Python, ":")
	if !ok || module == "" || class == "" {
		return nil, fmt.Errorf("harness.external.python %q: want module:Class", o.External.Python)
	}
	interp, err := interpreter(o, module)
	if err != nil {
		return nil, fmt.Errorf("harness.external.python %s: %w", o.External.Python, err)
	}
	dir, err := privateDir("evalsi-harness-")
	if err != nil {
		return nil, err
	}
	lib := filepath.Join(dir, "lib")
	if err := os.CopyFS(lib, python.Shim); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("writing the evalsi_harness shim: %w", err)
	}
	socket := filepath.Join(dir, "harness.sock")
	pypath := lib
	if o.Dir != "" {
		pypath += string(os.PathListSeparator) + o.Dir
	}
	cmd := exec.Command(interp, "-m", "evalsi_harness", "--socket", socket, "--class", module+":"+class)
	cmd.Dir = o.Dir
	cmd.Env = harnessEnv(o, harnesspb.SocketEnv+"="+socket, "PYTHONPATH="+pypath, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	p, err := start(cmd, dir, socket, o.Logger.With("harness", "external", "python", o.External.Python))
	if err != nil {
		return nil, fmt.Errorf("harness.external.python: starting %s: %w", interp, err)
	}
	return p, nil
}

func start(cmd *exec.Cmd, dir, socket string, log *slog.Logger) (*process, error) {
	p := &process{cmd: cmd, dir: dir, socket: socket, log: log, exited: make(chan struct{}), out: &tailBuffer{max: 8 << 10, log: log}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// Its own process group, so stopping it also stops what it started
	// (go run's child, a Python worker pool).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) exitErr() error {
	select {
	case <-p.exited:
		if p.err == nil {
			return errors.New("exit status 0")
		}
		return p.err
	default:
		return nil
	}
}

func (p *process) tail() string { return p.out.String() }

// stop ends the harness: SIGTERM to its process group, SIGKILL after a
// grace period, then removes its directory. An exit caused by the stop is
// not an error; an earlier crash is.
func (p *process) stop() error {
	var crashed error
	select {
	case <-p.exited:
		if p.err != nil {
			crashed = fmt.Errorf("the external harness had exited: %w", p.err)
		}
	default:
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.log.Warn("external harness did not stop on SIGTERM; killing it")
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.exited
		}
	}
	return errors.Join(crashed, os.RemoveAll(p.dir))
}

// tailBuffer keeps the end of a harness's output for error messages and
// logs each line at debug level.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	partial []byte
	log     *slog.Logger
}

func (b *tailBuffer) Write(data []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, data...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
	}
	b.partial = append(b.partial, data...)
	for {
		i := strings.IndexByte(string(b.partial), '\n')
		if i < 0 {
			break
		}
		b.log.Debug("external harness output", "line", string(b.partial[:i]))
		b.partial = b.partial[i+1:]
	}
	return len(data), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
