"""The name of Evals.si's tau2-bench harness.

A spec selects it with::

    harness: {external: {python: evalsi_taubench:TauBenchHarness}}

The Evals.si worker recognises that name and runs the harness in its own
process, in Go (``harness/taubench`` in the Evals.si repository): tau2's
domains, orchestrator and ``evaluate_simulation``, checked against
recordings of tau2's own code. No Python runs, and this package does not
contain or install tau2. The class below exists so the name resolves, and
says so if something tries to host it with the Python harness shim.
"""

HARNESS = "evalsi_taubench:TauBenchHarness"


class TauBenchHarness:
    """Stands for the Go harness; the worker never instantiates it."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            "evalsi_taubench:TauBenchHarness runs inside the Evals.si worker, in Go "
            "(harness/taubench); it is not a Python harness. Name it in "
            "harness.external.python and run the spec with evalsi; do not host it "
            "with python -m evalsi_harness."
        )
