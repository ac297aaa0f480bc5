"""Runs the Go evalsi CLI with this process's arguments.

The binary is, in this order:

1. ``$EVALSI_BIN``, when set (a configured path; it must be executable);
2. ``bin/evalsi`` inside this package, when a wheel carries one;
3. built from the checkout of Evals.si this package came from, with
   ``go build`` into a cache directory (``$EVALSI_CACHE_DIR``, default
   ``$XDG_CACHE_HOME/evalsi`` or ``~/.cache/evalsi``), one binary per
   checkout. Go's build cache makes a rebuild of an unchanged checkout a
   no-op, so the binary always matches the sources;
4. another ``evalsi`` on ``PATH`` (not this script).

The checkout is found from this file's location (an editable install, as
``uv sync`` makes) or from the path recorded when the package was built
(``pip install ./python``).
"""

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

GO_MODULE = "module evals.si"


def _is_checkout(path):
    try:
        with open(os.path.join(path, "go.mod"), encoding="utf-8") as f:
            first = f.readline().strip()
    except OSError:
        return False
    return first == GO_MODULE and os.path.isdir(os.path.join(path, "cmd", "evalsi"))


def checkout():
    """The Evals.si checkout this package belongs to, or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    # Editable install: this file is python/evalsi/cli.py of the checkout.
    d = here
    for _ in range(4):
        d = os.path.dirname(d)
        if _is_checkout(d):
            return d
    try:
        from evalsi import _origin  # written by setup.py when a wheel is built
    except ImportError:
        return None
    if _origin.CHECKOUT and _is_checkout(_origin.CHECKOUT) and _trusted(_origin.CHECKOUT):
        return _origin.CHECKOUT
    return None


def _trusted(path):
    """Whether PATH is safe to build and run code from: the checkout, its
    go.mod and every directory above it belong to this user or root, and
    no one else can write to them (a world-writable parent only with the
    sticky bit, as /tmp has). The recorded path may be a temporary build
    directory (pip install git+URL) that pip deleted: anyone could create
    it again, and it must then not be built."""
    import stat

    me = os.geteuid()
    try:
        st = os.stat(os.path.join(path, "go.mod"))
    except OSError:
        return False
    if st.st_uid not in (me, 0) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return False
    d = os.path.realpath(path)
    first = True
    while True:
        try:
            st = os.stat(d)
        except OSError:
            return False
        if st.st_uid not in (me, 0):
            return False
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and (first or not st.st_mode & stat.S_ISVTX):
            return False
        first = False
        parent = os.path.dirname(d)
        if parent == d:
            return True
        d = parent


def cache_dir():
    base = os.environ.get("EVALSI_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "evalsi")
    return base


class BuildError(Exception):
    pass


def build(src, log=sys.stderr):
    """Builds (or finds current) SRC's cmd/evalsi; returns the binary's path."""
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "evalsi: building the Go CLI from %s needs Go 1.26 (https://go.dev/dl/) on PATH; "
            "or set EVALSI_BIN to an evalsi binary" % src
        )
    key = hashlib.sha256(os.path.realpath(src).encode()).hexdigest()[:16]
    out_dir = os.path.join(cache_dir(), "bin", key)
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "evalsi")
    env = dict(os.environ)
    # Static, as the repository's own builds are; the same flags as `go test`
    # and `make build` use, so Go's build cache of the dependencies is shared.
    env.setdefault("CGO_ENABLED", "0")
    with open(os.path.join(out_dir, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two evalsi started at once build once
        if not os.path.exists(out):
            print("evalsi: building the Go CLI from %s into %s (once; later runs reuse it)" % (src, out), file=log)
        proc = subprocess.run(
            [go, "build", "-o", out, "./cmd/evalsi"],
            cwd=src, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
    if proc.returncode != 0:
        raise BuildError("evalsi: go build ./cmd/evalsi in %s failed (exit %d):\n%s" % (src, proc.returncode, proc.stdout))
    return out


def _on_path():
    me = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    for d in os.environ.get("PATH", "").split(os.pathsep):
        # An empty or relative entry means the current directory: a cloned
        # repository's own ./evalsi must not run in its place.
        if not os.path.isabs(d):
            continue
        c = os.path.join(d, "evalsi")
        if os.path.isfile(c) and os.access(c, os.X_OK) and os.path.realpath(c) != me and not _is_python_script(c):
            return c
    return None


def _is_python_script(path):
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]


def find_binary():
    """The Go evalsi binary to run (see the module docstring)."""
    configured = os.environ.get("EVALSI_BIN")
    if configured:
        if not (os.path.isfile(configured) and os.access(configured, os.X_OK)):
            raise BuildError("evalsi: EVALSI_BIN=%s is not an executable file; unset it or point it at an evalsi binary" % configured)
        return configured
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "evalsi")
    if os.path.isfile(bundled) and os.access(bundled, os.X_OK):
        return bundled
    src = checkout()
    if src is not None:
        return build(src)
    found = _on_path()
    if found:
        return found
    raise BuildError(
        "evalsi: no evalsi binary: this package was not installed from a checkout of Evals.si "
        "that is still there and writable only by you (or root), and no evalsi is on PATH. "
        "Install from such a checkout (pip install ./python), "
        "or set EVALSI_BIN to a binary built with go build ./cmd/evalsi"
    )


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        binary = find_binary()
    except BuildError as e:
        print(e, file=sys.stderr)
        return 4  # the CLI's exit code for an internal error
    sys.stdout.flush()
    sys.stderr.flush()
    # exec, not a child: signals, the terminal and the exit code are the
    # Go CLI's own.
    os.execv(binary, [binary] + args)
