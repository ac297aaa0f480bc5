"""Runs the schemathesis CLI (server/schemathesis_test.go calls this with
the venv's python) with one work-around.

Hypothesis describes each filter lambda by parsing its source file with
ast.parse; on CPython 3.11 that raises "SystemError: AST constructor
recursion depth mismatch" when called deep in a stack (CPython gh-106905),
which schemathesis's coverage phase is. The description is only a repr,
so a failed parse is described as unknown instead of failing the run.
"""

import sys

from hypothesis.internal import lambda_sources

_describe = getattr(lambda_sources, "_lambda_description", None)


def _lambda_description(f, *args, **kwargs):
    try:
        return _describe(f, *args, **kwargs)
    except SystemError:
        return "lambda: <unknown>"


if _describe is not None:
    lambda_sources._lambda_description = _lambda_description

from schemathesis.cli import schemathesis  # noqa: E402

if __name__ == "__main__":
    sys.argv[0] = "schemathesis"
    sys.exit(schemathesis())
