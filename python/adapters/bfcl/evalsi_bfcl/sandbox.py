"""A multi-turn trial's child process, seen from the adapter.

The calls run BFCL's Python classes, and model-chosen arguments can burn CPU
or memory (MathAPI.power(10, 10**9), square_root(precision=10**9)), or
change process-wide state (square_root sets the decimal context's
precision). So each multi-turn trial gets a child of its own, forked from a
forkserver that has the bfcl modules imported: a trial costs a fork, not a
Python start. The child runs under RLIMIT_AS and RLIMIT_CPU, and the parent
waits for each call only so long; a call over a limit ends the child, and
the trial with it (LimitExceeded)."""

import multiprocessing
import signal

from evalsi_bfcl import _child


class Limits:
    """Per-trial limits of a multi-turn child. Seconds of wall-clock time
    per call and for the checker; CPU seconds likewise; memory in MiB above
    what the forked child maps at start (0 or less: no limit)."""

    def __init__(self, call_seconds=10.0, call_cpu_seconds=10, check_seconds=300.0, check_cpu_seconds=300,
                 start_seconds=120.0, memory_mb=2048, grade_seconds=30.0):
        # A single-turn answer's grading takes milliseconds; a crafted one
        # (Java/JavaScript converters' regular expressions are quadratic
        # in the text) gets grade_seconds of wall-clock and CPU time.
        self.grade_seconds = grade_seconds
        self.call_seconds = call_seconds
        self.call_cpu_seconds = call_cpu_seconds
        self.check_seconds = check_seconds
        self.check_cpu_seconds = check_cpu_seconds
        self.start_seconds = start_seconds
        self.memory_mb = memory_mb

    @classmethod
    def from_env(cls, getenv):
        """Limits from EVALSI_BFCL_CALL_SECONDS, EVALSI_BFCL_CHECK_SECONDS
        and EVALSI_BFCL_MEMORY_MB (0: no memory limit); the CPU limits
        follow the wall-clock ones."""
        d = cls()

        def number(name, default, kind):
            v = getenv(name)
            if not v:
                return default
            try:
                n = kind(v)
            except ValueError:
                raise ValueError("%s=%r is not a%s number" % (name, v, "n integer" if kind is int else "")) from None
            if n <= 0 and kind is float:
                raise ValueError("%s=%r: want seconds above 0" % (name, v))
            return n

        call = number("EVALSI_BFCL_CALL_SECONDS", d.call_seconds, float)
        check = number("EVALSI_BFCL_CHECK_SECONDS", d.check_seconds, float)
        mem = number("EVALSI_BFCL_MEMORY_MB", d.memory_mb, int)
        return cls(call_seconds=call, call_cpu_seconds=max(1, int(call)), check_seconds=check,
                   check_cpu_seconds=max(1, int(check)), memory_mb=mem)

    def for_child(self):
        return {"memory_mb": self.memory_mb, "call_cpu_seconds": self.call_cpu_seconds,
                "grade_cpu_seconds": max(1, int(self.grade_seconds)),
                "check_cpu_seconds": self.check_cpu_seconds, "start_cpu_seconds": max(1, int(self.start_seconds))}


class LimitExceeded(Exception):
    """A call (or the checker) went over a limit; the child is gone."""

    def __init__(self, kind, detail):
        self.kind = kind
        super().__init__("%s limit: %s" % (kind, detail))


class ChildError(Exception):
    """The child failed in a way that is not the model's doing."""


def context():
    """The forkserver context, preloading the child's module (and with it
    bfcl_eval's classes and checker) into the forkserver."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["evalsi_bfcl._child"])
    return ctx


class _Child:
    """A child process forked from the forkserver, and its pipe."""

    def __init__(self, ctx, limits, target, args, name):
        self.limits = limits
        self._conn, child_conn = ctx.Pipe()
        self._proc = ctx.Process(target=target, args=(child_conn,) + args, name=name, daemon=True)
        self._proc.start()
        child_conn.close()

    def _wait(self, seconds, what):
        try:
            ready = self._conn.poll(seconds)
        except (EOFError, OSError):
            ready = True
        if not ready:
            self.close(kill=True)
            raise LimitExceeded("wall-clock", "%s took over %gs" % (what, seconds))
        try:
            msg = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(5)
            code = self._proc.exitcode
            self.close()
            if code == -signal.SIGXCPU:
                raise LimitExceeded("cpu", "%s used up its CPU time" % what) from None
            if code == -signal.SIGKILL:
                # The kernel's OOM killer, or RLIMIT_CPU's hard limit.
                raise LimitExceeded("memory", "%s was killed (SIGKILL)" % what) from None
            raise LimitExceeded("crash", "%s ended the child process (exit status %s)" % (what, code)) from None
        if msg[0] == "limit":
            self.close()
            raise LimitExceeded(msg[1], msg[2])
        return msg

    def _send(self, msg):
        try:
            self._conn.send(msg)
        except (OSError, ValueError):
            pass  # the child is gone: _wait says how it ended
        except Exception as e:
            # The model's values could not be pickled (too deep, too big):
            # its own doing, graded as a check that went over a limit.
            self.close(kill=True)
            raise LimitExceeded("input", "the model's values cannot be sent to the child: %s" % type(e).__name__) from None

    def close(self, kill=False):
        """Ends the child (idempotent); kill: without asking it first."""
        p = self._proc
        if p is None:
            return
        self._proc = None
        if p.is_alive() and not kill:
            try:
                self._conn.send(("exit",))
            except (OSError, ValueError):
                pass
            p.join(1)
        if p.is_alive():
            p.kill()
            p.join(5)
        self._conn.close()
        p.close()


class Session(_Child):
    """One multi-turn trial's child."""

    def __init__(self, ctx, spec, limits):
        super().__init__(ctx, limits, _child.child_main, (spec, limits.for_child()), "evalsi-bfcl-" + spec["id"])
        msg = self._wait(limits.start_seconds, "making the entry's class instances")
        if msg[0] == "error":
            self.close()
            raise ChildError(msg[1])

    def execute(self, call):
        """Runs one checked call string; returns BFCL's result text."""
        self._send(("exec", call))
        msg = self._wait(self.limits.call_seconds, "the call")
        if msg[0] != "ok":
            self.close()
            raise ChildError(msg[1])
        return msg[1]

    def check(self, model_result, ground_truth, entry, category):
        """BFCL's multi-turn grading (eval_runner's entry function) in the
        child; returns the verdict summary."""
        self._send(("check", model_result, ground_truth, entry, category))
        msg = self._wait(self.limits.check_seconds, "the checker")
        if msg[0] != "ok":
            self.close()
            raise ChildError(msg[1])
        return msg[1]


def grade_single(ctx, entry, responses, limits):
    """BFCL's single-turn grading of one answer (grading.grade_single) in a
    child of its own, as a verdict summary: the Java and JavaScript type
    converters run regular expressions over the model's text, which a
    crafted answer can make take hours, so the grading gets grade_seconds
    of CPU and wall-clock time. Raises LimitExceeded."""
    c = _Child(ctx, limits, _child.grade_main, (entry, responses, limits.for_child()), "evalsi-bfcl-grade-" + entry.id)
    try:
        msg = c._wait(limits.grade_seconds, "grading the answer")
        if msg[0] != "ok":
            raise ChildError(msg[1])
        return msg[1]
    finally:
        c.close()
