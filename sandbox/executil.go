package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults every rung applies when the config or request leaves them zero.
const (
	DefaultCommandTimeout = 10 * time.Minute
	DefaultWorkdir        = "/workspace"
	// DefaultPath is the PATH a sandbox gets when its config sets none.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// CommandTimeout is the timeout that applies to req under cfg.
func CommandTimeout(cfg Config, req ExecRequest) time.Duration {
	switch {
	case req.Timeout > 0:
		return req.Timeout
	case cfg.CommandTimeout > 0:
		return cfg.CommandTimeout
	}
	return DefaultCommandTimeout
}

// OutputLimit is the per-stream cap that applies to req.
func OutputLimit(req ExecRequest) int {
	if req.OutputLimit > 0 {
		return req.OutputLimit
	}
	return DefaultOutputLimit
}

// CommandEnv builds a command's whole environment: PATH defaults to
// DefaultPath, then the config's env, then the request's env (which wins),
// sorted. Nothing comes from the engine's own environment.
func CommandEnv(cfg, req map[string]string) ([]string, error) {
	m := map[string]string{"PATH": DefaultPath}
	for _, src := range []map[string]string{cfg, req} {
		for k, v := range src {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
				return nil, fmt.Errorf("bad environment variable %q: names must be non-empty without '=' or NUL, values without NUL", k)
			}
			m[k] = v
		}
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out, nil
}

// InSandboxPath resolves p as the sandbox sees it: relative paths are
// relative to workdir. The result is absolute and clean.
func InSandboxPath(workdir, p string) string {
	if p == "" {
		return path.Clean(workdir)
	}
	if !path.IsAbs(p) {
		p = path.Join(workdir, p)
	}
	return path.Clean(p)
}

// CappedBuffer keeps the first Limit bytes written to it and counts the
// rest, so a chatty command cannot exhaust the engine's memory. It never
// returns an error, so the writer feeding it keeps draining the pipe.
type CappedBuffer struct {
	mu        sync.Mutex
	limit     int
	buf       []byte
	truncated bool
}

// NewCappedBuffer makes a buffer keeping at most limit bytes.
func NewCappedBuffer(limit int) *CappedBuffer { return &CappedBuffer{limit: limit} }

func (b *CappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.limit - len(b.buf)
	if room < len(p) {
		b.truncated = true
		if room > 0 {
			b.buf = append(b.buf, p[:room]...)
		}
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Bytes returns what was kept.
func (b *CappedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.buf)
}

// Truncated reports whether anything was dropped.
func (b *CappedBuffer) Truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.truncated
}

// StateDir is where a sandbox of the named rung keeps its state: dir when
// the caller gave one, else a new temporary directory. The sandbox owns
// (and removes when it closes) a directory it had to create, the temporary
// one or a given dir that did not exist yet; a given dir that already
// existed is the caller's, and the sandbox only empties what it put there.
func StateDir(dir, rung string) (path string, owned bool, err error) {
	if dir == "" {
		p, err := os.MkdirTemp("", "evalsi-"+rung+"-")
		if err != nil {
			return "", false, fmt.Errorf("creating a %s sandbox state dir: %w", rung, err)
		}
		return p, true, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", false, fmt.Errorf("creating a %s sandbox state dir: %w", rung, err)
	}
	switch err := os.Mkdir(dir, 0o700); {
	case err == nil:
		return dir, true, nil
	case errors.Is(err, fs.ErrExist):
		if st, serr := os.Stat(dir); serr != nil || !st.IsDir() {
			return "", false, fmt.Errorf("%s sandbox state dir %s exists and is not a directory", rung, dir)
		}
		return dir, false, nil
	default:
		return "", false, fmt.Errorf("creating a %s sandbox state dir: %w", rung, err)
	}
}
