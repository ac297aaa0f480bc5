"""The child process of one multi-turn trial: it holds the trial's BFCL class
instances, executes the checked calls and runs BFCL's multi-turn checker,
under RLIMIT_AS and RLIMIT_CPU. The forkserver imports this module (and so
bfcl_eval's execution classes and checker) once; each trial is a fork.

grade_main is the child of one single-turn answer's grading: it answers
("ok", verdict summary) | ("limit", kind, detail) | ("error", text) once.

Messages on the pipe of child_main (parent -> child):
  ("exec", call string)                     -> ("ok", result string) | ("limit", kind, detail)
  ("check", model results, ground truth, entry, category) -> ("ok", result dict) | ("limit", ...) | ("error", text)
  ("exit",)
The child first answers ("ready",) once the instances exist (or ("error",
text) if they cannot be made).
"""

import builtins
import importlib
import math
import resource
import traceback

from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
from bfcl_eval.eval_checker import eval_runner
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

from evalsi_bfcl.decode import FCDecoder
from evalsi_bfcl.entry import GRADING_MODEL, MULTI_TURN_CLASSES
from evalsi_bfcl.verdict import summary

for _name in MULTI_TURN_CLASSES:
    importlib.import_module(CLASS_FILE_PATH_MAPPING[_name])

# The inference-time instances' name prefix, as BaseHandler derives it from
# the model name (model_name_underline_replaced). The checker's own
# instances are named after GRADING_MODEL + "_eval", so they start fresh.
INFERENCE_MODEL = "gpt_4o_2024_11_20"


def _vm_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1])
    return 0


def _set_memory(mb):
    if mb <= 0:
        return
    # Relative to what the forked image already maps, which is mostly
    # shared with the forkserver.
    limit = _vm_kb() * 1024 + mb * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _set_cpu(seconds):
    """Allows this much more CPU time from now: past it the kernel sends
    SIGXCPU, which ends the process."""
    if seconds <= 0:
        return
    ru = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(math.ceil(ru.ru_utime + ru.ru_stime + seconds))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def child_main(conn, spec, limits):
    """spec: {"id", "initial_config", "involved_classes", "long_context"}."""
    memory_hit = []

    # BFCL catches every Exception of an executed call into its result text,
    # MemoryError too; note it so the call counts as over the limit. This
    # stands in for the builtin eval in multi_turn_utils' namespace, with
    # the same globals the builtin would use there.
    def guarded_eval(source, globals=None, locals=None):
        try:
            return builtins.eval(source, multi_turn_utils.__dict__ if globals is None else globals, locals)
        except MemoryError:
            memory_hit.append(source)
            raise

    multi_turn_utils.eval = guarded_eval

    def execute(calls, is_eval):
        return multi_turn_utils.execute_multi_turn_func_call(
            calls, spec["initial_config"], spec["involved_classes"], INFERENCE_MODEL, spec["id"],
            long_context=spec["long_context"], is_evaL_run=is_eval)[0]

    try:
        _set_memory(limits["memory_mb"])
        _set_cpu(limits["start_cpu_seconds"])
        # As BFCL's loop does first: make the instances (long-context
        # scenarios load their bulk data here).
        execute([], False)
    except MemoryError:
        conn.send(("limit", "memory", "making the entry's class instances"))
        return
    except Exception as e:  # noqa: BLE001 - reported to the parent as an infra error
        conn.send(("error", "making the entry's class instances: %s: %s" % (type(e).__name__, e)))
        return
    conn.send(("ready",))

    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        op = msg[0]
        if op == "exit":
            return
        try:
            if op == "exec":
                _set_cpu(limits["call_cpu_seconds"])
                out = execute([msg[1]], False)[0]
                if memory_hit:
                    conn.send(("limit", "memory", "the call ran out of memory"))
                    return
                conn.send(("ok", out))
            elif op == "check":
                _, model_result, ground_truth, entry, category = msg
                _set_cpu(limits["check_cpu_seconds"])
                r = eval_runner._evaluate_single_multi_turn_entry(
                    FCDecoder(), entry["id"], model_result, ground_truth, entry, GRADING_MODEL, category)
                if memory_hit:
                    conn.send(("limit", "memory", "the checker's re-execution ran out of memory"))
                    return
                # The verdict's part of BFCL's result only: the rest repeats
                # the entry and the instances' whole state.
                conn.send(("ok", summary(r)))
            else:
                conn.send(("error", "unknown operation %r" % (op,)))
        except MemoryError:
            conn.send(("limit", "memory", "out of memory in %s" % op))
            return
        except Exception as e:  # noqa: BLE001
            conn.send(("error", "%s: %s: %s\n%s" % (op, type(e).__name__, e, traceback.format_exc(limit=5))))


def grade_main(conn, entry, responses, limits):
    """Grades one single-turn answer (grading.grade_single) under the
    checker's limits and sends the verdict summary."""
    from evalsi_bfcl.grading import grade_single

    try:
        _set_memory(limits["memory_mb"])
        _set_cpu(limits["grade_cpu_seconds"])
        conn.send(("ok", summary(grade_single(entry, responses))))
    except MemoryError:
        conn.send(("limit", "memory", "grading the answer ran out of memory"))
    except Exception as e:  # noqa: BLE001 - reported to the parent as an infra error
        conn.send(("error", "grading: %s: %s\n%s" % (type(e).__name__, e, traceback.format_exc(limit=5))))
