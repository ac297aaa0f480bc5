"""The process environment bfcl_eval needs before it is imported."""

import atexit
import os
import shutil
import tempfile

# Set (to the same path as BFCL_PROJECT_ROOT) by the process that made the
# private root, so its forked and forkserver children reuse it instead of
# making their own.
_MARK = "EVALSI_BFCL_PRIVATE_ROOT"


def ensure_private_root(environ=None):
    """Points BFCL_PROJECT_ROOT at a private temporary directory.

    bfcl_eval.constants.eval_config mkdirs result/, score/ and .file_locks/
    under BFCL_PROJECT_ROOT at import (default: the directory holding the
    installed package) and load_file takes lock files in .file_locks/. A
    root set by someone else is overridden too: this process must not write
    into a BFCL checkout or results tree it happens to inherit. The process
    that made the directory removes it at exit.
    """
    env = os.environ if environ is None else environ
    root = env.get("BFCL_PROJECT_ROOT", "")
    if root and env.get(_MARK) == root and os.path.isdir(root):
        return root
    root = tempfile.mkdtemp(prefix="evalsi-bfcl-")
    env["BFCL_PROJECT_ROOT"] = root
    env[_MARK] = root
    owner = os.getpid()

    def cleanup():
        if os.getpid() == owner:
            shutil.rmtree(root, ignore_errors=True)

    atexit.register(cleanup)
    return root
