"""The evalsi command, from Python.

Evals.si is written in Go; this package installs an ``evalsi`` console
script (and ``python -m evalsi``) that runs the Go CLI with the same
arguments and passes its exit code through. See :mod:`evalsi.cli` for how
the binary is found or built.
"""

from evalsi.cli import find_binary, main

__all__ = ["find_binary", "main"]
