package python

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv"
)

// The README's and the documentation's Python quick start, from a fresh
// clone: `cd python && uv sync --all-packages && uv run evalsi run -f
// ../examples/agents/fix-calc-offline.yaml`, and `pip install ./python` into
// a fresh venv, then `evalsi --help` and the same run from another
// directory. The evalsi console script builds the Go CLI from the clone
// (each install with a cache of its own, so both build). Nothing reaches the
// network: uv runs --offline from the cache scripts/uv.sh warmed, pip
// installs with --no-index from its wheel directory, Go with GOPROXY=off.
//
// The clone is of HEAD plus the working tree's uncommitted changes (copied
// over, ignored files left out), so the test checks the tree as it would
// be committed; once everything is committed that is a plain clone.
func TestQuickStart(t *testing.T) {
	uv, err := exec.LookPath("uv")
	if err != nil {
		testenv.Missing(t, "uv", "uv is not installed (bash scripts/uv.sh installs it and warms its cache)")
	}
	wheels := os.Getenv("EVALSI_PIP_WHEELS")
	if wheels == "" {
		wheels = "/var/cache/evalsi/pip-wheels"
	}
	if m, _ := filepath.Glob(filepath.Join(wheels, "setuptools-*.whl")); len(m) == 0 {
		testenv.Missing(t, "pip wheels", "no setuptools wheel in "+wheels+" (bash scripts/uv.sh downloads it)")
	}
	for _, tool := range []string{"bwrap", "git", "go", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool, tool+" is not installed")
		}
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import pytest").Run(); err != nil {
		testenv.Missing(t, "pytest", "/usr/bin/python3 has no pytest (the example's checker runs it): apt-get install python3-pytest")
	}
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-10*time.Second))
		defer cancel()
	}

	tmp := t.TempDir()
	clone := filepath.Join(tmp, "evalsi")
	src, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "", nil, "git", "clone", "-q", src, clone)
	overlayWorkingTree(t, ctx, src, clone)

	env := offlineEnv(tmp)
	uvEnv := append(env, "EVALSI_CACHE_DIR="+filepath.Join(tmp, "cache-uv"))
	py := filepath.Join(clone, "python")
	// --locked: the committed uv.lock is current for the pyprojects.
	run(t, ctx, py, uvEnv, uv, "sync", "--all-packages", "--offline", "--locked")
	out := run(t, ctx, py, uvEnv, uv, "run", "--offline", "evalsi", "run", "-f", "../examples/agents/fix-calc-offline.yaml",
		"--json", "--store", filepath.Join(tmp, "uv.db"))
	checkFixed(t, "uv run evalsi", out)

	venv := filepath.Join(tmp, "venv")
	run(t, ctx, "", env, "python3", "-m", "venv", venv)
	// pip builds ./python with build isolation, as `pip install ./python`
	// does; the build backend comes from the wheel directory.
	run(t, ctx, clone, env, filepath.Join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check",
		"--no-index", "--find-links", wheels, "./python")
	evalsi := filepath.Join(venv, "bin", "evalsi")
	pipEnv := append(env, "EVALSI_CACHE_DIR="+filepath.Join(tmp, "cache-pip"))
	if out := run(t, ctx, tmp, pipEnv, evalsi, "--help"); !strings.Contains(out, "run") {
		t.Errorf("evalsi --help shows no run command:\n%s", out)
	}
	// From a directory outside the clone, with the spec's absolute path.
	other := t.TempDir()
	out = run(t, ctx, other, pipEnv, evalsi, "run", "-f", filepath.Join(clone, "examples", "agents", "fix-calc-offline.yaml"),
		"--json", "--store", filepath.Join(tmp, "pip.db"))
	checkFixed(t, "pip-installed evalsi", out)

	// The Go CLI's exit code comes through: 2 for a spec that is not there.
	cmd := exec.CommandContext(ctx, evalsi, "run", "-f", filepath.Join(other, "missing.yaml"), "--store", filepath.Join(tmp, "pip.db"))
	cmd.Env = pipEnv
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("evalsi run -f missing.yaml: %v, want exit 2\n%s", err, stderr.String())
	}
}

// checkFixed reads `evalsi run --json`: the scripted agent fixed calc.py
// and the checker passed.
func checkFixed(t *testing.T, what, out string) {
	t.Helper()
	var sum struct {
		Status  string             `json:"status"`
		Errored int                `json:"errored"`
		Scores  map[string]float64 `json:"scores"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("%s: --json output is not one JSON object: %v\n%s", what, err, out)
	}
	if sum.Errored != 0 || sum.Scores["task-success"] != 1 {
		t.Errorf("%s: errored %d, scores %v, want no error and task-success 1", what, sum.Errored, sum.Scores)
	}
}

// offlineEnv is this process's environment with every package source
// closed: uv and pip offline, no Go module downloads, no managed Python.
func offlineEnv(tmp string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "EVALSI_BIN", "EVALSI_CACHE_DIR", "VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "UV_OFFLINE=1", "UV_PYTHON_DOWNLOADS=never", "PIP_NO_INDEX=1",
		"GOPROXY=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0", "TMPDIR="+tmp)
}

// overlayWorkingTree copies src's uncommitted changes (modified and
// untracked files that are not ignored; deletions) into the clone.
func overlayWorkingTree(t *testing.T, ctx context.Context, src, clone string) {
	t.Helper()
	out := run(t, ctx, src, nil, "git", "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
	for _, entry := range strings.Split(out, "\x00") {
		if len(entry) < 4 {
			continue
		}
		status, path := entry[:2], entry[3:]
		dst := filepath.Join(clone, filepath.FromSlash(path))
		if strings.Contains(status, "D") {
			if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			continue
		}
		if err := copyFile(filepath.Join(src, filepath.FromSlash(path)), dst); err != nil {
			t.Fatalf("copying the working tree's %s into the clone: %v", path, err)
		}
	}
}

func copyFile(from, to string) error {
	fi, err := os.Lstat(from)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // removed since git status listed it
		}
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	os.Remove(to)
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(from)
		if err != nil {
			return err
		}
		return os.Symlink(target, to)
	}
	r, err := os.Open(from)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// run runs a command (env nil: this process's) and returns its stdout,
// failing the test with its output when it fails.
func run(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s (in %s): %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), dir, err, stdout.String(), stderr.String())
	}
	t.Logf("%s %s: %s", filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return stdout.String()
}
