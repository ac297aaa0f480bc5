"""evalsi_bfcl: the Berkeley Function Calling Leaderboard (bfcl-eval==2026.3.23)
as an Evals.si external harness.

The worker serves it with the evalsi_harness shim::

    python/adapters/bfcl/.venv/bin/python -m evalsi_harness --class evalsi_bfcl:BFCLHarness

BFCLHarness offers a BFCL entry's functions to the target model (through the
worker's Chat, so provider keys stay with the engine) and grades the answer
with BFCL's own decoder, AST checker, multi-turn execution classes and
multi-turn checker. See README.md.

Importing this package first points BFCL_PROJECT_ROOT at a private
temporary directory: bfcl_eval creates result/, score/ and .file_locks/
under that root when imported (by default next to its own package), and we
want it to write nowhere else. The heavy imports happen only when
BFCLHarness is first used, so the multi-turn child processes' forkserver can
import evalsi_bfcl._child cheaply.
"""

from evalsi_bfcl._env import ensure_private_root

ensure_private_root()

__all__ = ["BFCLHarness"]


def __getattr__(name):
    if name == "BFCLHarness":
        from evalsi_bfcl.harness import BFCLHarness

        return BFCLHarness
    raise AttributeError("module 'evalsi_bfcl' has no attribute %r" % name)
